"""The Surface port: where replies go. Implemented by the Slack and GitHub adapters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PostedRef:
    """Where a post landed, e.g. Slack ``channel:ts`` or GitHub ``owner/repo#12:comment_id``."""

    surface: str
    ref: str


class Surface(Protocol):
    name: str

    async def post(self, thread_ref: str, text: str, *, key: str) -> PostedRef:
        """Post once into the thread. ``key`` is carried in hidden metadata for reconcile."""
        ...

    async def find_post(self, thread_ref: str, *, key: str) -> PostedRef | None:
        """Reconcile: the post carrying ``key``, if one landed."""
        ...

    async def update(self, posted: PostedRef, text: str) -> None: ...

    async def react(self, thread_ref: str, emoji: str) -> None: ...
