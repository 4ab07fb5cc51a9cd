"""What a phase may use, and what it returns: the next phase and the writes that go with it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar

from runtime.brief.port import Briefing
from runtime.clock import Clock
from runtime.config import AgentConfig
from runtime.errors import UnknownAgent
from runtime.execution import Phase, RunState
from runtime.executor.accounting import Accounting
from runtime.executor.faults import FaultPlan
from runtime.executor.fitting import Window
from runtime.models.base import ModelProvider, Purpose, Usage
from runtime.scheduler import Scheduler
from runtime.store.engine import Database, Transaction
from runtime.store.executions import Run
from runtime.store.records import Task, TaskResult
from runtime.tools.base import Tool
from runtime.workspace.setup import SetupReport
from runtime.workspace.snapshots import Taken, Unchanged, Withheld

# continue: keep the lease and tick again now; delay: release and tick at ``delay_s``;
# wait: park the task until input or a child arrives (and, with ``wake_at``, tick then
# anyway); done: the run is over.
After = Literal["continue", "delay", "wait", "done"]

Write = Callable[[Transaction], None]


# The phase a transition goes to. A phase function's return type names the phases it may
# go to (``Transition[Literal["call_model", "report_stopped"]]``), so mypy holds each phase
# to its successors in the phase table (``runtime/executor/phase_table.py``).
To = TypeVar("To", bound=Phase, covariant=True)


@dataclass(frozen=True, slots=True)
class Transition(Generic[To]):
    phase: To
    state: RunState
    turn: int
    mailbox_position: int
    writes: tuple[Write, ...] = ()
    after: After = "continue"
    delay_s: float = 0.0
    wait_guard: Callable[[Transaction], bool] | None = None
    wake_at: datetime | None = None


Target = TypeVar("Target", bound=Phase)


def goto(
    run: Run,
    phase: Target,
    *,
    state: RunState | None = None,
    turn: int | None = None,
    mailbox_position: int | None = None,
    writes: tuple[Write, ...] = (),
    after: After = "continue",
    delay_s: float = 0.0,
    wait_guard: Callable[[Transaction], bool] | None = None,
    wake_at: datetime | None = None,
) -> Transition[Target]:
    """The run moves to ``phase``; what is not given stays as the run has it."""
    return Transition(
        phase=phase,
        state=run.state if state is None else state,
        turn=run.turn if turn is None else turn,
        mailbox_position=run.mailbox_position if mailbox_position is None else mailbox_position,
        writes=writes,
        after=after,
        delay_s=delay_s,
        wait_guard=wait_guard,
        wake_at=wake_at,
    )


class ContextSource(Protocol):
    """Extra model context for a task: repository guidance, the origin thread, ..."""

    async def sections(self, task: Task) -> list[str]: ...


class Reporter(Protocol):
    """Queues what people should see; called inside the executor's transactions."""

    def on_phase(self, session: Transaction, task: Task, phase: str, detail: str) -> None: ...

    def on_finished(self, session: Transaction, task: Task, result: TaskResult) -> None: ...


class SilentReporter:
    def on_phase(self, session: Transaction, task: Task, phase: str, detail: str) -> None:
        return None

    def on_finished(self, session: Transaction, task: Task, result: TaskResult) -> None:
        return None


class Settler:
    """Settlements that arrive together share one commit; each still lands on its own."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._queue: list[tuple[Write, asyncio.Future[None]]] = []
        self._lock = asyncio.Lock()

    async def submit(self, write: Write) -> None:
        done = asyncio.get_running_loop().create_future()
        self._queue.append((write, done))
        async with self._lock:
            if not done.done():
                batch, self._queue = self._queue, []
                try:
                    await self._db.run(lambda s: [w(s) for w, _ in batch] and None)
                except Exception as e:  # every waiter of this batch sees the failure
                    for _, waiter in batch:
                        waiter.set_exception(e)
                else:
                    for _, waiter in batch:
                        waiter.set_result(None)
        await done


WorkspaceResolver = Callable[[Task], Awaitable[Path | None]]
# Sets the task's workspace up (once per workspace), telling ``started`` what it begins.
Progress = Callable[[str], Awaitable[None]]
WorkspacePreparer = Callable[[Task, Progress], Awaitable[SetupReport | None]]


async def _no_workspace(task: Task) -> Path | None:
    return None


async def _no_setup(task: Task, started: Progress) -> SetupReport | None:
    return None


class SnapshotTaker(Protocol):
    """Saves a workspace where another machine can restore it (``SnapshotStore``)."""

    async def take(
        self,
        ws: Path,
        root_id: str,
        machine: str,
        previous: tuple[str, str] | None = None,
        secrets: Sequence[str] = (),
    ) -> Taken | Unchanged | Withheld: ...


async def _discard_nothing(root_id: str) -> None:
    return None


async def _no_secrets(task_id: str) -> Sequence[str]:
    return ()


@dataclass(frozen=True, slots=True)
class ModelSetup:
    """The model an agent's calls go to: its provider, its window, and its prices."""

    provider: ModelProvider
    window: Window
    accounting: Accounting


@dataclass(slots=True)
class ExecutorContext:
    db: Database
    scheduler: Scheduler
    provider: ModelProvider
    tools: Mapping[str, Tool]
    agents: Mapping[str, AgentConfig]
    clock: Clock
    reporter: Reporter = field(default_factory=SilentReporter)
    context_sources: tuple[ContextSource, ...] = ()
    briefing: Briefing = field(default_factory=Briefing)
    workspace_for: WorkspaceResolver = _no_workspace
    prepare_workspace: WorkspacePreparer = _no_setup
    # Resident agents (a daemon's role): agent name -> idle lifetime in seconds. Their final
    # answer parks the task for the next mailbox item instead of ending it.
    resident: Mapping[str, float] = field(default_factory=dict)
    # Keel passes its one plan; a context built alone (the recovery drivers) reads its own.
    faults: FaultPlan = field(default_factory=FaultPlan.from_env)
    poll_interval_s: float = 0.5
    background: set[asyncio.Task[None]] = field(default_factory=set)
    observe_phase: Callable[[str, float], None] = lambda phase, seconds: None
    # The model's window, and how its calls are priced.
    window: Window = field(default_factory=Window)
    accounting: Accounting = field(default_factory=Accounting)
    observe_model_call: Callable[[Purpose, Usage | None, float], None] = (
        lambda purpose, usage, seconds: None
    )
    # How long a task waits out a model provider outage before it ends with a reply saying so.
    outage_give_up_s: float = 1800.0
    # Tools built for one agent's settings (its network, protected push, delegation), by
    # agent name; an agent not listed uses ``tools``.
    agent_tools: Mapping[str, Mapping[str, Tool]] = field(default_factory=dict)
    # Agents with a model of their own, by agent name; any other uses ``provider``,
    # ``window`` and ``accounting``.
    agent_models: Mapping[str, ModelSetup] = field(default_factory=dict)
    # This machine (``runtime.store.owners``), and where its workspaces are saved for another
    # machine; without both no snapshot is taken.
    machine: str | None = None
    snapshots: SnapshotTaker | None = None
    # Drops this machine's copy of a tree's workspace (a stale one, after another machine
    # held it): the next use makes it afresh from the latest snapshot.
    discard_workspace: Callable[[str], Awaitable[None]] = _discard_nothing
    # Every secret value a task's workspace must not carry away (a snapshot holding one is
    # withheld), by task id.
    secrets_of: Callable[[str], Awaitable[Sequence[str]]] = _no_secrets
    settler: Settler = field(init=False)

    def __post_init__(self) -> None:
        self.settler = Settler(self.db)

    def agent(self, name: str) -> AgentConfig:
        """The task's own agent. One that is not configured (the configuration changed
        under a task) fails the task rather than run it with settings nobody wrote."""
        found = self.agents.get(name)
        if found is None:
            known = ", ".join(self.agents) or "none"
            raise UnknownAgent(f"agent {name!r} is not configured (agents: {known})")
        return found

    def idle_lifetime_s(self, task: Task) -> float | None:
        """How long a resident agent's task may wait for input; None if it is not resident.
        A child of a daemon runs as the daemon's agent (its deny and limits bind it) but
        ends at its answer: only the root of a tree is resident."""
        if task.parent_id is not None:
            return None
        return self.resident.get(task.agent)

    def model_for(self, agent_name: str) -> ModelSetup:
        """The model the agent's calls go to: its own, else the default."""
        own = self.agent_models.get(agent_name)
        return own if own is not None else ModelSetup(self.provider, self.window, self.accounting)

    def tools_for(self, agent_name: str) -> dict[str, Tool]:
        """The tools of the task's agent, built with that agent's settings."""
        allowed = self.agent(agent_name).tools
        built = self.agent_tools.get(agent_name, self.tools)
        return {name: tool for name, tool in built.items() if name in allowed}
