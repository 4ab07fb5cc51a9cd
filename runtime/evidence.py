"""Evidence items: the durable facts a reply may cite, each with how strongly it is known."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Literal

EvidenceKind = Literal[
    "commit", "pull_request", "test_run", "ci_run", "comment", "read_back", "setup",
    "network_refused",
]


class Strength(IntEnum):
    """Ordered: a claim is only as strong as the way it was observed."""

    tool_reported = 1
    provider_read_back = 2
    verified = 3


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    kind: EvidenceKind
    ref: str
    strength: Strength
    detail: dict[str, Any] = field(default_factory=dict)
