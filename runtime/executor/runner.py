"""The tick: load the run, run exactly one phase, persist its transition with its records.

An unexpected exception inside a phase is persisted as structured error state and moves the
run to ``report_failure``, which runs on the next tick like any other phase. A stale writer
(its lease lost, or the version moved) changes nothing.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from runtime.errors import StaleWrite
from runtime.execution import FIRST_PHASE, Failure, Phase
from runtime.executor import phases
from runtime.executor.context import ExecutorContext, Transition
from runtime.executor.phase_table import LAST_RESORT, TABLE, may_follow
from runtime.store import executions, task_changes, tool_calls, transcripts
from runtime.store import tasks as q
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import Lease, Task
from runtime.store.transcripts import TranscriptEntry

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class TickResult:
    # continue: this worker still holds the lease and should tick again;
    # released: the lease was given back (next tick scheduled, parked, or finished);
    # lost: another writer advanced the run; this worker must let go.
    status: Literal["continue", "released", "lost"]
    phase: str  # where the run is now, as far as this worker knows ("missing" if gone)


@dataclass(frozen=True, slots=True)
class _Held:
    """What a lease holder keeps between its own ticks."""

    run: Run
    task: Task
    transcript: tuple[TranscriptEntry, ...] = ()  # as last read; later items are read on top


class Runner:
    """Ticks runs. Between its own ticks of one lease it keeps the run in memory: the version
    fence makes that copy authoritative (any other writer moves the version and our next
    commit loses), and what others may change (the task's status, mailbox and stop; the
    turn's calls; new transcript items) is read inside each commit, so a tick needs no read
    transaction of its own."""

    def __init__(self, ctx: ExecutorContext) -> None:
        self.ctx = ctx
        self._held: dict[str, _Held] = {}

    def forget(self, lease: Lease) -> None:
        self._held.pop(lease.lease_id, None)

    async def tick(self, lease: Lease) -> TickResult:
        held = self._held.pop(lease.lease_id, None)
        if held is None:
            held = await self.ctx.db.read(lambda s: _load(s, lease.task_id))
        if held is None:
            return TickResult("lost", "missing")
        run = held.run
        if run.lease_id != lease.lease_id:
            return TickResult("lost", run.phase)
        started = time.monotonic()
        transition = await self._run_phase(run, held.task)
        self.ctx.observe_phase(run.phase, time.monotonic() - started)
        try:
            # A transition lost in a crash of the database server is done again from the
            # phase before it; anything it leads to outside the database commits with a
            # flush first (``Database.run``).
            status, fresh = await self.ctx.db.run(
                lambda s: self._commit(s, held, lease, transition), flush=False
            )
        except StaleWrite:
            return TickResult("lost", run.phase)
        self.ctx.faults.hit(f"commit:{run.phase}")
        if fresh is not None:
            self._held[lease.lease_id] = fresh
        if log.isEnabledFor(logging.INFO):
            await self._log_lifecycle(run, held.task, transition)
        return TickResult(status, transition.phase)

    async def _log_lifecycle(self, run: Run, task: Task, transition: Transition[Phase]) -> None:
        """An operator's trail of a task, after each commit that moves it: started, waiting
        (for what the phase awaits), ended with its status and summary."""
        extra = {"task_id": task.task_id, "phase": transition.phase}
        if run.phase == FIRST_PHASE and run.turn == 0:
            log.info("task %s: started (agent %s)", task.task_id, task.agent, extra=extra)
        if transition.phase == "done" and run.phase != "done":  # a re-tick of done: said
            final = await self.ctx.db.read(lambda s: q.get_task(s, task.task_id))
            status = final.status.value if final is not None else "gone"
            summary = str((final.result or {}).get("summary", "")) if final is not None else ""
            log.info("task %s: %s: %s", task.task_id, status, summary[:200], extra=extra)
        elif transition.after == "wait":
            log.info("task %s: waiting in %s", task.task_id, transition.phase, extra=extra)

    async def _run_phase(self, run: Run, task: Task) -> Transition[Phase]:
        try:
            transition = await TABLE[run.phase].run(run, task, self.ctx)
            if not may_follow(run.phase, transition.phase):
                raise RuntimeError(f"phase {run.phase} may not go to {transition.phase}")
            return transition
        except Exception as e:  # loop boundary: the failure becomes data for the next tick
            log.exception(
                "phase %s of task %s failed",
                run.phase,
                task.task_id,
                extra={"task_id": task.task_id, "phase": run.phase},
            )
            if run.phase in LAST_RESORT:
                raise
            trace = traceback.format_exc(limit=8)
            return phases.failed(run, Failure(run.phase, str(e), type(e).__name__, trace))

    def _commit(
        self, session: Transaction, held: _Held, lease: Lease, transition: Transition[Phase]
    ) -> tuple[Literal["continue", "released"], _Held | None]:
        """Persist the transition; when this worker ticks on, also what its next tick reads."""
        run = held.run
        now = self.ctx.clock.now()
        if transition.after == "wait":
            # Lock our task row first: a child reporting its result locks it too, so either
            # it sees us waiting (and wakes us) or our guard below sees it finished.
            q.lock_task_row(session, run.task_id)
        for write in transition.writes:
            write(session)
        after = transition.after
        if after == "wait" and transition.wait_guard is not None:
            after = "wait" if transition.wait_guard(session) else "delay"
        advance = executions.Advance(
            transition.phase, transition.turn, transition.mailbox_position, transition.state, now
        )
        if after == "continue":
            task = task_changes.advance_and_refresh(
                session, run, lease.lease_id, held.task, advance
            )
            return "continue", _with_reads(session, _advanced(run, transition), held, task)
        executions.commit_transition(session, run, lease.lease_id, advance)
        scheduler = self.ctx.scheduler
        match after:
            case "delay":
                at = now + timedelta(seconds=transition.delay_s)
                scheduler.leases.release(session, lease, at)
            case "wait":
                # Refused when input arrived meanwhile: then tick again at once.
                parked = scheduler.enter_waiting(session, run.task_id)
                scheduler.leases.release(session, lease, transition.wake_at if parked else now)
            case "done":
                scheduler.leases.release(session, lease, None)
        return "released", None


def _advanced(run: Run, transition: Transition[Phase]) -> Run:
    """The run as the commit of ``transition`` left it."""
    return Run(
        run.task_id,
        transition.phase,
        transition.turn,
        transition.mailbox_position,
        transition.state,
        run.version + 1,
        run.lease_id,
    )


_NEEDS_CALLS: frozenset[Phase] = frozenset(
    {"dispatch_tools", "await_tools", "advance_turn", "waiting"}
)
_NEEDS_TRANSCRIPT: frozenset[Phase] = frozenset({"call_model", "report_terminal"})


def _with_reads(
    session: Transaction, run: Run, held: _Held | None = None, task: Task | None = None
) -> _Held | None:
    """The run's task (``task``, when the commit read it already), and what the run's phase
    reads first: whether a stop is recorded on the task or an ancestor, the turn's tool
    calls, the transcript. None if the task is gone.
    """
    if held is None:
        task = q.read_task(session, run.task_id)
    if task is None:
        return None
    known = held.transcript if held else ()
    calls = transcript = None
    if run.phase in _NEEDS_CALLS:
        calls = tuple(tool_calls.calls_of_turn(session, run.task_id, run.turn))
    if run.phase in _NEEDS_TRANSCRIPT:
        after = known[-1].seq if known else 0
        later = transcripts.transcript(session, run.task_id, after=after)
        known = transcript = known + tuple(later)
    stop = q.stop_recorded(session, task)
    run = replace(run, stop_requested=stop, calls=calls, transcript=transcript)
    return _Held(run, task, known)


def _load(session: Transaction, task_id: str) -> _Held | None:
    run = executions.load_run(session, task_id)
    return None if run is None else _with_reads(session, run)
