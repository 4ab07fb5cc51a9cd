"""The Tool port: what the executor needs from any tool, built in or provided by an adapter.

A tool's ``effect`` decides how a call found ``dispatching`` with no result is recovered:
``read`` is started again, ``wait`` is polled with the same handle, ``write`` is reconciled if
the tool can (``reconcile`` returns ``Completed``) and otherwise settled as interrupted.
Tool failures are results for the model (``Completed(is_error=True)``), never exceptions.

A tool whose started work outlives ``start`` (a command, say) may also be ``Cancellable``:
when the task is stopped while such a call is open, the executor ends the work through
``cancel`` instead of waiting for it.
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
class Stopped:
    """The call's work was ended by a stop. ``output`` is what the model sees."""

    output: str


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


@runtime_checkable
class Cancellable(Protocol):
    """A tool that can end the work of an open call early.

    ``cancel`` is called with the recorded handle, or None when a crash came between marking
    the call dispatching and recording its handle; the tool then finds its work from
    ``ctx.call_id`` and must make sure that a start that comes later starts nothing. It is
    safe to repeat. ``Completed`` means the work had already ended on its own.
    """

    async def cancel(
        self, handle: str | None, ctx: ToolContext, reason: str
    ) -> Stopped | Completed: ...


@runtime_checkable
class Previewable(Protocol):
    """A tool that can say, before a call runs, what the call will do (for an approval)."""

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> str: ...
