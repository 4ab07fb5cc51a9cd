"""Tool phases: dispatch, await, and turn advance, with the recovery rules per effect.

A call is marked ``dispatching`` (committed) before its tool is invoked, so a crash leaves
evidence that the effect may have happened. Recovery of such a call: read → start again;
wait → poll its handle (or start again: wait tools derive their work from the call id);
write → ``reconcile`` or settle as ``interrupted``. The first settled result is authoritative.

A stop starts nothing new, and ends what runs: an open call whose tool is ``Cancellable`` is
cancelled (its result says what stopped it) at the first ``await_tools`` tick that sees the
stop, by this worker or by the one that recovers the run; other open calls are awaited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from runtime.errors import KeelError
from runtime.executor import approval
from runtime.executor import transcript as tx
from runtime.executor.context import ExecutorContext, Transition, Write, goto
from runtime.executor.phases import limit_reached, turns_used
from runtime.store import ledger, links, owners, tool_calls, transcripts
from runtime.store import tasks as q
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import Task
from runtime.store.tool_calls import ToolCallRecord
from runtime.tools.base import (
    Cancellable,
    Completed,
    Pending,
    Started,
    Stopped,
    Tool,
    ToolContext,
    Unknown,
)
from runtime.workspace.snapshots import Taken, Withheld

log = logging.getLogger(__name__)

CHILD_WAIT_TOOL = "wait_for_task"


async def dispatch_tools(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["dispatch_tools", "await_tools", "await_approval"]]:
    calls = await _calls_of_turn(run, ctx)
    pending = [c for c in calls if c.dispatch_state == "pending"]
    if run.stop_requested:
        # Not recovering the dispatching calls here: await_tools ends or awaits them.
        await _cancel_unstarted(task, ctx, pending)
        return goto(run, "await_tools")
    await _recover(task, ctx, [c for c in calls if c.dispatch_state == "dispatching"])
    if not pending:
        return goto(run, "await_tools")
    limits = ctx.agent(task.agent).limits
    batch = pending[: limits.fanout]
    cleared = approval.unapproved(run, task, ctx, batch)
    if cleared == 0:
        return await approval.ask(run, task, ctx, batch[0])
    batch = batch[:cleared]
    ids = [c.call_id for c in batch]
    deadline = await ctx.db.run(lambda s: _mark_unless_stopped(s, task, ctx, ids))
    if deadline is None:
        await _cancel_unstarted(task, ctx, pending)
        return goto(run, "await_tools")
    for call in batch:
        ctx.faults.hit(f"dispatching:{call.call_id}")
    await asyncio.gather(*(_start(task, ctx, call, deadline) for call in batch))
    if len(pending) > len(batch):
        return goto(run, "dispatch_tools")
    return goto(run, "await_tools")


def _mark_unless_stopped(
    session: Transaction, task: Task, ctx: ExecutorContext, ids: list[str]
) -> datetime | None:
    """Mark ``dispatching`` (returning the deadline) only if no stop is recorded, under the
    task row's lock.

    ``request_cancel`` takes the same lock, so a stop recorded before this commit is seen
    here and no tool starts after it; a stop recorded later finds the calls already started.
    """
    current = q.read_task(session, task.task_id, lock=True)
    if current is None or q.stop_recorded(session, current):
        return None
    now = ctx.clock.now()
    deadline = now + timedelta(seconds=ctx.agent(task.agent).limits.tool_deadline_s)
    tool_calls.mark_dispatching(session, task.task_id, ids, deadline, now)
    return deadline


async def await_tools(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["await_tools", "advance_turn"]]:
    calls = await _calls_of_turn(run, ctx)
    open_calls = [c for c in calls if c.dispatch_state != "settled"]
    if run.stop_requested and open_calls:
        open_calls = await _stop_open(task, ctx, open_calls)
    now = ctx.clock.now()
    for call in open_calls:
        if call.deadline_at is not None and call.deadline_at <= now:
            await _settle(task, ctx, call, "deadline", _deadline_result(call))
        elif call.dispatch_state == "started" and call.handle is not None:
            await _poll(task, ctx, call)
        elif call.dispatch_state == "dispatching":
            await _recover(task, ctx, [call])
    if open_calls:  # some may have settled just now
        calls = await ctx.db.read(lambda s: tool_calls.calls_of_turn(s, task.task_id, run.turn))
        open_calls = [c for c in calls if c.dispatch_state != "settled"]
    if not open_calls:
        return goto(run, "advance_turn")
    if all(c.name == CHILD_WAIT_TOOL and c.handle for c in open_calls):
        children = [str(c.handle) for c in open_calls]
        return goto(run, "await_tools", after="wait", wait_guard=_children_running(children))
    return goto(run, "await_tools", after="delay", delay_s=ctx.poll_interval_s)


async def advance_turn(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["check_scheduler", "report_stopped", "report_failure"]]:
    calls = await _calls_of_turn(run, ctx)
    now = ctx.clock.now()

    items = [
        transcripts.NewItem(
            tx.result_key(call.call_id),
            "tool",
            "tool_result",
            {
                "type": "tool_result",
                "call_id": call.call_id,
                "output": (call.result or {}).get("output", ""),
                "is_error": bool((call.result or {}).get("is_error")),
                "outcome": call.outcome,
            },
        )
        for call in sorted(calls, key=lambda c: c.idx)
    ]

    def write(session: Transaction) -> None:
        transcripts.add_transcript_items(session, task.task_id, items, now)

    writes: tuple[Write, ...] = (write,)
    if any(call.effect != "read" for call in calls):
        writes += await snapshot(run, task, ctx)
    if run.stop_requested:
        return goto(run, "report_stopped", writes=writes)
    limits = ctx.agent(task.agent).limits
    if turns_used(run) + 1 >= limits.max_turns:
        limited = limit_reached(run, "max_turns", limits.max_turns)
        return goto(run, "report_failure", state=limited.state, writes=writes)
    return goto(run, "check_scheduler", turn=run.turn + 1, writes=writes)


async def snapshot(run: Run, task: Task, ctx: ExecutorContext) -> tuple[Write, ...]:
    """Save the task's workspace for another machine, after a turn whose calls may have
    changed it (``runtime.workspace.snapshots``): the record of it commits with the turn.
    A snapshot that fails is logged and the task goes on: the previous one still stands."""
    machine, snapshots = ctx.machine, ctx.snapshots
    if machine is None or snapshots is None or task.repo is None:
        return ()
    ws = await ctx.workspace_for(task)
    if ws is None:
        return ()
    owner = await ctx.db.read(lambda s: owners.owner_of(s, task.root_id))
    if owner is None or owner.machine_id != machine:
        return ()  # not this machine's workspace (any more): its owner saves it
    last = owner.snapshot
    try:
        previous = (last.sha, last.tree) if last else None
        secrets = await ctx.secrets_of(task.task_id)
        taken = await snapshots.take(ws, task.root_id, machine, previous, secrets)
    except KeelError as e:
        log.warning("no snapshot of task %s's workspace: %s", task.task_id, e)
        return ()
    if isinstance(taken, Withheld):
        log.warning(
            "no snapshot of task %s's workspace: %s hold a secret's value",
            task.task_id,
            ", ".join(taken.paths[:5]),
            extra={"task_id": task.task_id},
        )
        return ()
    if not isinstance(taken, Taken):
        return ()
    saved = owners.Snapshot(taken.sha, taken.tree, run.turn, ctx.clock.now())

    def record(session: Transaction) -> None:
        owners.record_snapshot(session, task.root_id, machine, saved)

    return (record,)


async def _calls_of_turn(run: Run, ctx: ExecutorContext) -> Sequence[ToolCallRecord]:
    """The turn's calls as the tick loaded them, or read now."""
    if run.calls is not None:
        return run.calls
    return await ctx.db.read(lambda s: tool_calls.calls_of_turn(s, run.task_id, run.turn))


def _children_running(child_ids: list[str]) -> Any:
    def guard(session: Transaction) -> bool:
        children = [q.get_task(session, child_id) for child_id in child_ids]
        return all(c is not None and not c.status.is_terminal for c in children)

    return guard


# -- one call -------------------------------------------------------------------------------


def _tool_of(ctx: ExecutorContext, task: Task, name: str) -> Tool | None:
    return ctx.tools_for(task.agent).get(name)


async def _tool_context(ctx: ExecutorContext, task: Task, call: ToolCallRecord) -> ToolContext:
    workspace = await ctx.workspace_for(task)
    return ToolContext(task.task_id, task.root_id, call.call_id, task.depth, workspace)


async def _start(
    task: Task, ctx: ExecutorContext, call: ToolCallRecord, deadline: datetime
) -> None:
    tool = _tool_of(ctx, task, call.name)
    if tool is None:
        result = {"output": f"unknown tool {call.name!r}", "is_error": True}
        await _settle(task, ctx, call, "error", result)
        return
    tool_ctx = await _tool_context(ctx, task, call)
    job = asyncio.ensure_future(_guarded(tool.start(call.args, tool_ctx)))
    remaining = max(0.0, (deadline - ctx.clock.now()).total_seconds())
    done, _ = await asyncio.wait({job}, timeout=remaining)
    if not done:
        # Not a cancel: the work may still finish; its late report will be a recorded no-op.
        await _settle(task, ctx, call, "deadline", _deadline_result(call))
        _report_late(task, ctx, call, job)
        return
    await _record_outcome(task, ctx, call, job.result())


async def _guarded(work: Any) -> Completed | Started | Pending:
    """Tool failures are results for the model, never task failures."""
    try:
        outcome: Completed | Started | Pending = await work
    except Exception as e:  # loop boundary: a tool's bug becomes its result
        return Completed(f"tool failed: {type(e).__name__}: {e}", is_error=True)
    return outcome


def _report_late(task: Task, ctx: ExecutorContext, call: ToolCallRecord, job: Any) -> None:
    async def late() -> None:
        outcome = await job
        if isinstance(outcome, Completed):
            await _settle(task, ctx, call, "ok", _completed_result(outcome), outcome)

    background = asyncio.ensure_future(late())
    ctx.background.add(background)
    background.add_done_callback(ctx.background.discard)


async def _record_outcome(
    task: Task, ctx: ExecutorContext, call: ToolCallRecord, outcome: Completed | Started | Pending
) -> None:
    match outcome:
        case Completed():
            ctx.faults.hit(f"started:{call.call_id}")
            await _settle_completed(task, ctx, call, outcome)
        case Started(handle=handle):
            await ctx.db.run(
                lambda s: tool_calls.record_handle(s, task.task_id, call.call_id, handle)
            )
            ctx.faults.hit(f"started:{call.call_id}")
        case Pending():
            pass


async def _poll(task: Task, ctx: ExecutorContext, call: ToolCallRecord) -> None:
    tool = _tool_of(ctx, task, call.name)
    if tool is None or call.handle is None:
        return
    tool_ctx = await _tool_context(ctx, task, call)
    outcome = await _guarded(tool.poll(call.handle, tool_ctx))
    if isinstance(outcome, Completed):
        await _settle_completed(task, ctx, call, outcome)


async def _recover(task: Task, ctx: ExecutorContext, calls: list[ToolCallRecord]) -> None:
    for call in calls:
        tool = _tool_of(ctx, task, call.name)
        deadline = call.deadline_at or ctx.clock.now()
        if tool is None or call.effect == "read":
            await _start(task, ctx, call, deadline)
        elif call.effect == "wait":
            await (_poll(task, ctx, call) if call.handle else _start(task, ctx, call, deadline))
        else:
            await _reconcile(task, ctx, call, tool)


async def _reconcile(task: Task, ctx: ExecutorContext, call: ToolCallRecord, tool: Tool) -> None:
    tool_ctx = await _tool_context(ctx, task, call)
    try:
        found = await tool.reconcile(call.args, tool_ctx)
    except Exception as e:  # loop boundary: reconcile failing leaves the effect unknown
        found = Unknown(f"reconcile failed: {type(e).__name__}: {e}")
    if isinstance(found, Completed):
        await _settle(task, ctx, call, "ok", _completed_result(found), found)
        return
    output = (
        f"interrupted: {call.name} was dispatched but its result was lost, so whether it took "
        f"effect is unknown ({found.reason}). It was not repeated."
    )
    await _settle(task, ctx, call, "interrupted", {"output": output, "is_error": True})


async def _stop_open(
    task: Task, ctx: ExecutorContext, calls: list[ToolCallRecord]
) -> list[ToolCallRecord]:
    """Cancel the open calls whose tools can end their work; return the calls still open."""
    targets: list[tuple[ToolCallRecord, Cancellable]] = []
    for call in calls:
        tool = _tool_of(ctx, task, call.name)
        if call.dispatch_state in ("dispatching", "started") and isinstance(tool, Cancellable):
            targets.append((call, tool))
    if not targets:
        return calls
    reason = await ctx.db.read(lambda s: _stop_reason(s, task))
    ended = await asyncio.gather(*(_cancel(task, ctx, c, t, reason) for c, t in targets))
    gone = {call.call_id for (call, _), done in zip(targets, ended, strict=True) if done}
    return [call for call in calls if call.call_id not in gone]


async def _cancel(
    task: Task, ctx: ExecutorContext, call: ToolCallRecord, tool: Cancellable, reason: str
) -> bool:
    """End one call's work and settle it; False if cancelling failed (the call stays open)."""
    ctx.faults.hit(f"stopping:{call.call_id}")
    try:
        tool_ctx = await _tool_context(ctx, task, call)
        outcome = await tool.cancel(call.handle, tool_ctx, reason)
    except Exception:  # loop boundary: the call stays open, and the next tick tries again
        log.exception(
            "cancelling %s of task %s failed",
            call.call_id,
            task.task_id,
            extra={"task_id": task.task_id},
        )
        return False
    ctx.faults.hit(f"stopped:{call.call_id}")
    if isinstance(outcome, Stopped):
        result = {"output": outcome.output, "is_error": True}
        await _settle(task, ctx, call, "canceled", result)
    else:
        await _settle_completed(task, ctx, call, outcome)
    return True


def _stop_reason(session: Transaction, task: Task) -> str:
    """Why the task stopped, in words: the first stop (or end) on it or up its ancestry."""
    current = q.get_task(session, task.task_id)
    whose = "task"
    while current is not None:
        if current.cancel_requested_at is not None:
            stop = q.stop_request(session, current.task_id)
            reason = (stop.reason if stop else None) or "stopped on request"
            return reason if whose == "task" else f"{reason}, on a parent task"
        if current.status.is_terminal:
            return f"the {whose} is {current.status.value.replace('_', ' ')}"
        current = q.get_task(session, current.parent_id) if current.parent_id else None
        whose = "parent task"
    return "the task is gone"


async def _cancel_unstarted(task: Task, ctx: ExecutorContext, calls: list[ToolCallRecord]) -> None:
    for call in calls:
        result = {"output": "not started: the task was stopped", "is_error": True}
        await _settle(task, ctx, call, "canceled", result)


def _completed_result(outcome: Completed) -> dict[str, Any]:
    return {"output": outcome.output, "is_error": outcome.is_error}


def _deadline_result(call: ToolCallRecord) -> dict[str, Any]:
    output = f"deadline: {call.name} did not finish in time; its work may still complete"
    return {"output": output, "is_error": True}


async def _settle_completed(
    task: Task, ctx: ExecutorContext, call: ToolCallRecord, outcome: Completed
) -> None:
    name = "error" if outcome.is_error else "ok"
    await _settle(task, ctx, call, name, _completed_result(outcome), outcome)


async def _settle(
    task: Task,
    ctx: ExecutorContext,
    call: ToolCallRecord,
    outcome: str,
    result: dict[str, Any],
    completed: Completed | None = None,
) -> None:
    """Settle once; evidence lands in the same transaction as the settlement."""
    now = ctx.clock.now()

    def write(session: Transaction) -> None:
        won = tool_calls.settle(
            session, task.task_id, call.call_id, outcome=outcome, result=result, now=now
        )
        if won and completed is not None:
            for item in completed.evidence:
                ledger.add_evidence(session, task.task_id, task.root_id, call.call_id, item, now)
                links.record_evidence(session, task.task_id, task.root_id, item, now)

    await ctx.settler.submit(write)
    ctx.faults.hit(f"settled:{call.call_id}")
