"""Who may ask: the port through which routing learns a person's permission on a repository.

Routing owns the question; an adapter (the GitHub client) answers it. Answers are cached
briefly per (repository, login), so a burst of comments from one person costs one lookup.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from routing.signal import Signal


class PermissionSource(Protocol):
    """A person's permission on a repository (``read`` … ``admin``), or None if they have none.

    Raises ``runtime.errors.KeelError`` when the provider could not be asked.
    """

    async def permission(self, repo: str, login: str) -> str | None: ...


class CachedPermissions:
    """A ``PermissionSource`` in front of another, remembering answers for ``ttl_s``."""

    def __init__(
        self,
        source: PermissionSource,
        *,
        ttl_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.ttl_s = ttl_s
        self._now = monotonic
        self._answers: dict[tuple[str, str], tuple[float, str | None]] = {}

    async def permission(self, repo: str, login: str) -> str | None:
        known = self.recent(repo, login)
        if known is not None:
            return known.permission
        answer = await self.source.permission(repo, login)
        self._answers[(repo, login)] = (self._now(), answer)
        return answer

    def recent(self, repo: str, login: str) -> Known | None:
        """The answer a lookup gave within ``ttl_s``, without asking; None if there is none."""
        cached = self._answers.get((repo, login))
        if cached is not None and self._now() - cached[0] <= self.ttl_s:
            return Known(cached[1])
        return None


@dataclass(frozen=True, slots=True)
class Known:
    """A remembered answer: ``permission`` None means the person has none."""

    permission: str | None


def needs_permission(signal: Signal) -> bool:
    """A GitHub person's request whose permission nobody has looked up yet."""
    actor = signal.actor
    return (
        signal.provider == "github"
        and signal.repo is not None
        and not actor.is_self
        and actor.permission is None
    )


def with_permission(signal: Signal, permission: str | None) -> Signal:
    return replace(signal, actor=replace(signal.actor, permission=permission))
