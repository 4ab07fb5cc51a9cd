"""The port through which the worker learns about a task's origin, and the brief's settings.

``BriefSource`` is implemented by the adapters (Slack and GitHub context fetchers) and wired
by the composition root; without one a brief holds only what the stored Signal says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from runtime.brief.model import Gathered, Origin, Sender
from runtime.config import ContextConfig
from runtime.store.records import SenderPart


class BriefSource(Protocol):
    async def gather(self, origin: Origin) -> Gathered:
        """Everything fetchable about ``origin``; a failed fetch is named in ``missing``,
        never raised."""
        ...

    async def sender(self, part: SenderPart) -> Sender:
        """The display name (and link) of a follow-up's author, from its ``sender`` part."""
        ...


@dataclass(frozen=True, slots=True)
class Briefing:
    source: BriefSource | None = None
    settings: ContextConfig = field(default_factory=ContextConfig)
    vision: bool = False
