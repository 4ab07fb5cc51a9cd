"""The Tool port: what the executor needs from any tool, built in or provided by an adapter.

A tool's ``effect`` decides how a call found ``dispatching`` with no result is recovered:
``read`` is started again, ``wait`` is polled with the same handle, ``write`` is reconciled if
the tool can (``reconcile`` returns ``Completed``) and otherwise settled as interrupted.
Tool failures are results for the model (``Completed(is_error=True)``), never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from runtime.evidence import EvidenceItem

Effect = Literal["read", "write", "wait"]


@dataclass(frozen=True, slots=True)
class Completed:
    """A settled outcome. ``output`` is what the model sees."""

    output: str
    is_error: bool = False
    evidence: tuple[EvidenceItem, ...] = ()


@dataclass(frozen=True, slots=True)
class Started:
    """A wait tool started observable work; ``handle`` is stable across processes."""

    handle: str


@dataclass(frozen=True, slots=True)
class Pending:
    """The work behind a handle has not finished yet."""

    detail: str = ""


@dataclass(frozen=True, slots=True)
class Unknown:
    """Reconciliation could not establish whether a write took effect."""

    reason: str


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a call knows about where it runs. ``call_id`` is stable across recovery."""

    task_id: str
    root_task_id: str
    call_id: str
    depth: int = 0
    workspace: Path | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON schema of the arguments object."""
        ...

    @property
    def effect(self) -> Effect: ...

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started: ...

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed: ...

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown: ...
