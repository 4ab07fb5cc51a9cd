"""Phases that read context, check the scheduler, call the model and report outcomes.

Each phase receives the durable run and returns the next durable state; it never runs the
task to completion. Tool dispatch, waiting and turn advance live in ``runtime.executor.tools``.

A resident agent's task (a daemon's role) does not end at a final answer: it parks in
``await_input`` (status ``waiting``) until its mailbox gets an item, which starts its next
activation, or until its idle lifetime passes, which ends it with a summary. Limits count per
activation (``activation`` in the run state), so a role that lives for weeks is not failed
for the turns and hours of all the events before this one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from runtime.errors import ContextLengthExceeded, Permanent, Retryable, StaleWrite
from runtime.execution import Activation, Failure, Limit
from runtime.executor import (
    approval,
    brief,
    budget,
    compaction,
    endings,
    handover,
    outage,
    setup,
    wip,
)
from runtime.executor import transcript as tx
from runtime.executor.context import ExecutorContext, Transition, Write, goto
from runtime.models.base import ModelRequest, ToolCallItem, ToolSpec
from runtime.store import tasks as q
from runtime.store import tool_calls, transcripts, usage
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import Task, TaskResult, TaskStatus
from runtime.tools.arguments import refusal


def limit_reached(
    run: Run, name: str, value: int | float
) -> Transition[Literal["report_failure"]]:
    return goto(run, "report_failure", state=replace(run.state, limit=Limit(name, value)))


def failed(run: Run, failure: Failure) -> Transition[Literal["report_failure"]]:
    return goto(run, "report_failure", state=replace(run.state, error=failure))


async def load_context(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["check_scheduler"]]:
    agent = ctx.agent(task.agent)
    sections = [agent.instructions]
    if task.parent_id is not None and task.agent in ctx.resident:
        # A daemon's child runs as the role, whose instructions speak of waiting for events.
        sections.append(_ROLE_CHILD)
    for source in ctx.context_sources:
        sections.extend(await source.sections(task))
    sections.append(await _earlier_work(task, ctx))
    report = await setup.prepare(task, ctx)
    item = await brief.brief_item(task, ctx, report)
    now = ctx.clock.now()

    def write(session: Transaction) -> None:
        if item is not None:
            transcripts.add_transcript_items(session, task.task_id, [item], now)
        setup.record(session, task, report, now)
        ctx.reporter.on_phase(session, task, "load_context", "reading the request")

    state = replace(run.state, system="\n\n".join(s for s in sections if s))
    return goto(run, "check_scheduler", state=state, writes=(write,))


_ROLE_CHILD = (
    "This task is a child the role delegated: it does not wait for events. Do its goal, "
    "give a final answer, and it ends."
)


async def _earlier_work(task: Task, ctx: ExecutorContext) -> str:
    """What the task this one follows (same objective) did, so a follow-up builds on it, and
    the branch its work is on, which this task's workspace starts from and pushes to."""
    if task.follows_task_id is None:
        return ""
    earlier = await ctx.scheduler.get(task.follows_task_id)
    if earlier is None or not earlier.result:
        return ""
    summary = str(earlier.result.get("summary", "")).strip()
    told = f"Earlier work on this request (task {earlier.task_id}, {earlier.status}):\n{summary}"
    handed = await handover.handed_on(ctx.scheduler, task)
    return told if handed is None else f"{told}\n{handover.handed_text(handed)}"


async def check_scheduler(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["call_model", "report_stopped", "report_failure"]]:
    if run.stop_requested:
        return goto(run, "report_stopped")
    limits = ctx.agent(task.agent).limits
    if ctx.clock.now() - activation_since(run, task) > timedelta(seconds=limits.max_wall_seconds):
        return limit_reached(run, "max_wall_seconds", limits.max_wall_seconds)
    # Replies read while a call waited for approval are shown now, after its result.
    position = approval.replay_position(run)
    state = approval.after_turn(run.state)
    if task.mailbox_seq <= position:
        return goto(run, "call_model", state=state)
    messages = await ctx.scheduler.read_mailbox(task.task_id, after=position)
    if not messages:
        return goto(run, "call_model", state=state)
    items = await brief.follow_up_items(ctx, task, messages)
    now = ctx.clock.now()

    def write(session: Transaction) -> None:
        transcripts.add_transcript_items(session, task.task_id, items, now)

    last = max(messages[-1].seq, run.mailbox_position)
    return goto(run, "call_model", state=state, mailbox_position=last, writes=(write,))


async def call_model(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[
    Literal[
        "dispatch_tools", "report_terminal", "check_scheduler", "report_failure", "call_model",
        "await_budget",
    ]
]:
    parked = await budget.check(run, task, ctx)
    if parked is not None:
        return parked
    spent = await budget.tree_limit(task, ctx)
    if spent is not None:
        return limit_reached(run, spent.name, spent.value)
    agent = ctx.agent(task.agent)
    tools = ctx.tools_for(task.agent)
    entries = await transcript_of(run, ctx)
    system = run.state.system or ""
    specs = tuple(ToolSpec(t.name, t.description, t.parameters) for t in tools.values())
    model = ctx.model_for(task.agent)
    fitted = compaction.fit_request(run, model.window, entries, system, specs)
    if fitted.compaction is not None:
        try:
            return await compaction.compact(run, task, ctx, fitted.compaction)
        except Retryable as e:
            return outage.retry_model(run, task, ctx, e)
        except Permanent as e:
            message = f"summarising the work to fit the context window failed: {e}"
            return failed(run, Failure("call_model", message))
    request = ModelRequest(
        task_id=task.task_id,
        turn=run.turn,
        system=system,
        items=fitted.items,
        tools=specs,
        max_tokens=model.window.reply_tokens,
    )
    started = time.monotonic()
    try:
        response = await model.provider.complete(request)
    except ContextLengthExceeded as e:
        return compaction.after_overflow(run, e)
    except Retryable as e:
        return outage.retry_model(run, task, ctx, e)
    except Permanent as e:
        return failed(run, Failure("call_model", str(e)))
    seconds = time.monotonic() - started
    ctx.observe_model_call("turn", response.usage, seconds)
    usage_call = model.accounting.call(f"turn:{run.turn}", "turn", response.usage, seconds)
    calls = response.tool_calls
    if calls:
        before = run.state.activation.tool_calls_before if run.state.activation else 0
        used = sum(1 for e in entries if e.kind == "tool_call") - before
        if used + len(calls) > agent.limits.max_tool_calls:
            return limit_reached(run, "max_tool_calls", agent.limits.max_tool_calls)
    now = ctx.clock.now()

    items = []
    for index, item in enumerate(response.items):
        role, kind, payload = tx.item_payload(item)
        key = (
            tx.call_key(item.call_id)
            if isinstance(item, ToolCallItem)
            else tx.model_key(run.turn, index)
        )
        items.append(transcripts.NewItem(key, role, kind, payload))
    new_calls = [
        tool_calls.NewCall(
            call.call_id,
            run.turn,
            index,
            call.name,
            call.arguments,
            tool.effect if (tool := tools.get(call.name)) else "read",
            refusal(
                call.name,
                call.arguments,
                call.arguments_error,
                tool.parameters if tool is not None else None,
            ),
        )
        for index, call in enumerate(calls)
    ]

    def write(session: Transaction) -> None:
        transcripts.add_transcript_items(session, task.task_id, items, now)
        tool_calls.add_tool_calls(session, task.task_id, new_calls, now)
        usage.record_call(session, task.task_id, task.root_id, usage_call, now)
        if calls:
            names = ", ".join(c.name for c in calls)
            ctx.reporter.on_phase(session, task, "dispatch_tools", f"running {names}")

    state = compaction.calibrated(run, fitted.chars, response.usage)
    if calls:
        return goto(run, "dispatch_tools", state=state, writes=(write,))
    return goto(run, "report_terminal", state=state, writes=(write,))


async def transcript_of(run: Run, ctx: ExecutorContext) -> Sequence[transcripts.TranscriptEntry]:
    """The transcript as the tick loaded it, or read now."""
    if run.transcript is not None:
        return run.transcript
    return await ctx.db.read(lambda s: transcripts.transcript(s, run.task_id))


async def report_terminal(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["check_scheduler", "await_input", "done"]]:
    if task.mailbox_seq > run.mailbox_position:
        # Input arrived after the last check: the answer did not see it, so ask again.
        return goto(run, "check_scheduler", turn=run.turn + 1)
    entries = await transcript_of(run, ctx)
    lifetime = ctx.idle_lifetime_s(task)
    if lifetime is not None:
        return _park(run, ctx, tx.final_text(entries, run.turn), lifetime)
    calls = await ctx.db.read(lambda s: tool_calls.all_calls(s, task.task_id))
    interrupted = [
        {"call_id": c.call_id, "name": c.name} for c in calls if c.outcome == "interrupted"
    ]
    detail = {"outcome": "completed", "interrupted": interrupted}
    result = TaskResult(TaskStatus.succeeded, tx.final_text(entries, run.turn), detail)
    return _finish(run, task, ctx, result, unread_guard=True)


async def report_failure(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["done"]]:
    handed = await endings.hand_on(run, task, ctx, endings.of_failure(run.state))
    return _finish(run, task, ctx, handed.result, writes=handed.writes)


async def report_stopped(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["done"]]:
    current = await ctx.scheduler.get(task.task_id)
    if current is not None and current.status is TaskStatus.timed_out:
        result = TaskResult(
            TaskStatus.timed_out, "the task passed its deadline", {"outcome": "timed_out"}
        )
        ended_as = endings.Ended(result, wip.Ending("timed_out", "passed its deadline"))
    else:
        calls = await ctx.db.read(lambda s: tool_calls.all_calls(s, task.task_id))
        # Calls a stop cut short, as opposed to calls it kept from starting.
        ended = [c for c in calls if c.outcome == "canceled" and c.dispatched_at is not None]
        summary = "stopped on request"
        if ended:
            summary += f"; ended while running: {', '.join(c.name for c in ended)}"
        detail = {
            "outcome": "canceled",
            "ended": [{"call_id": c.call_id, "name": c.name} for c in ended],
        }
        result = TaskResult(TaskStatus.canceled, summary, detail)
        ended_as = endings.Ended(result, wip.Ending("stopped", "stopped on request"))
    handed = await endings.hand_on(run, task, ctx, ended_as)
    return _finish(run, task, ctx, handed.result, writes=handed.writes)


# -- resident agents ------------------------------------------------------------------------


def turns_used(run: Run) -> int:
    """Turns of the current activation: a resident task's turn count runs on across events."""
    activation = run.state.activation
    return run.turn - (activation.turn if activation else 0)


def activation_since(run: Run, task: Task) -> datetime:
    activation = run.state.activation
    return activation.since if activation else task.created_at


def _park(
    run: Run, ctx: ExecutorContext, answer: str, lifetime: float
) -> Transition[Literal["await_input"]]:
    """Wait for the next event; the tick at ``idle_until`` ends the task if none came."""
    idle_until = ctx.clock.now() + timedelta(seconds=lifetime)
    state = replace(
        run.state, idle_until=idle_until, idle_lifetime_s=lifetime, last_answer=answer
    )
    return goto(run, "await_input", state=state, after="wait", wake_at=idle_until)


async def await_input(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["await_input", "check_scheduler", "report_stopped", "done"]]:
    """Ticked by a new mailbox item, a stop, the idle timer, or a stale wake-up."""
    if run.stop_requested:
        return goto(run, "report_stopped")
    now = ctx.clock.now()
    if task.mailbox_seq > run.mailbox_position:
        return await _next_activation(run, ctx, now)
    idle_until = run.state.idle_until
    if idle_until is not None and now < idle_until:
        # Woken early (an older timer, a recovery): park again. Each park sets this timer
        # again; a duplicate at the same moment finds the run done and is dropped.
        return goto(run, "await_input", after="wait", wake_at=idle_until)
    return _finish(run, task, ctx, _idle_result(run), unread_guard=True)


async def _next_activation(
    run: Run, ctx: ExecutorContext, now: datetime
) -> Transition[Literal["check_scheduler"]]:
    entries = await transcript_of(run, ctx)
    calls_before = sum(1 for e in entries if e.kind == "tool_call")
    activation = Activation(run.turn + 1, now, calls_before)
    state = replace(
        run.state, idle_until=None, activation=activation, budget_grants=0, budget_ask=None
    )
    return goto(run, "check_scheduler", turn=run.turn + 1, state=state)


def _idle_result(run: Run) -> TaskResult:
    events = run.mailbox_position + 1  # the task's own message, then each mailbox item
    lifetime = run.state.idle_lifetime_s or 0.0
    last = (run.state.last_answer or "").strip()
    summary = (
        f"ended after {lifetime:g}s without a new event; handled {events} "
        f"event{'s' if events != 1 else ''}. Last answer: {last or '(none)'}"
    )
    detail = {"outcome": "idle", "events": events, "idle_lifetime_s": lifetime}
    return TaskResult(TaskStatus.succeeded, summary, detail)


def _finish(
    run: Run,
    task: Task,
    ctx: ExecutorContext,
    result: TaskResult,
    *,
    unread_guard: bool = False,
    writes: tuple[Write, ...] = (),
) -> Transition[Literal["done"]]:
    """Report to the scheduler in the same transaction as ``done``; benign if already final.

    With ``unread_guard`` a mailbox message appended since this tick read the task aborts the
    commit (the task row lock orders it against ``append_mailbox``): the message was accepted
    for this run, so the run must see it rather than finish over it. The next tick does.
    """

    def write(session: Transaction) -> None:
        locked = q.lock_task(session, task.task_id) if unread_guard else None
        if locked is not None and locked.mailbox_seq > run.mailbox_position:
            raise StaleWrite(f"task {task.task_id} got input while finishing")
        ctx.scheduler.report_result(session, task.task_id, result)
        final = stored_result(session, task, result)
        if _saved_after_settled(final, result):
            final = TaskResult(final.status, result.summary, {**result.detail, **final.detail})
            q.settle(session, task.task_id, final, ctx.clock.now())
        ctx.reporter.on_finished(session, task, final)

    return goto(run, "done", writes=(*writes, write), after="done")


def _saved_after_settled(final: TaskResult, ours: TaskResult) -> bool:
    """The deadline sweep settles a task before its run ends (``timed_out``): its status
    stands, and the run's ending adds where it saved the work (or why it could not), so the
    reply and the task that follows both see it."""
    if final.status is not ours.status or final.summary == ours.summary:
        return False
    return "saved" in ours.detail or "save_failed" in ours.detail


def stored_result(session: Transaction, task: Task, fallback: TaskResult) -> TaskResult:
    """The result the scheduler holds: the first terminal report wins over ours."""
    current = q.get_task(session, task.task_id)
    if current is None or current.result is None:
        return fallback
    stored = dict(current.result)
    status = TaskStatus(stored.pop("status", fallback.status))
    summary = str(stored.pop("summary", fallback.summary))
    return TaskResult(status, summary, stored)


async def done(run: Run, task: Task, ctx: ExecutorContext) -> Transition[Literal["done"]]:
    return goto(run, "done", after="done")
