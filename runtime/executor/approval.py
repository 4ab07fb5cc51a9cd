"""Approval before writes: a call to a tool named in ``agents.<name>.require_approval`` waits
for a person's word before it starts.

Before such a call is dispatched the task posts what it is about to do (the tool's
``preview``, else its arguments) and parks in ``await_approval`` (``waiting``), the same shape
as a budget's question: one outbox post keyed by the call (``approval:<call id>``), so a
redelivered tick or a restarted worker never asks twice, and the answer is a mailbox item,
so only what routing let through (an authorised reply, ✅ reaction or button click) counts.

``approve`` lets exactly that call go ahead: its id joins the run's approved calls in the
same commit that leaves the park, and dispatch then marks it ``dispatching`` once, as any
call. ``reject <reason>`` settles the call, in that commit, with the reason as the result the
model reads. Only replies written after the question count, and a button names its call, so
an old approval never lets a later write through. The replies read while parked are shown
to the model once the turn is over (``mailbox_replay_from``): a tool call's results must
follow it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from runtime.answers import APPROVE, REJECT, Approval, approval_of
from runtime.execution import ApprovalAsk, RunState
from runtime.executor.context import ExecutorContext, Transition, goto
from runtime.store import outbox, tool_calls
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import MailboxMessage, Task
from runtime.store.tool_calls import ToolCallRecord
from runtime.surfaces import Action
from runtime.tools.base import Previewable, ToolContext

Next = Transition[Literal["await_approval", "dispatch_tools"]]

def approval_key(call_id: str) -> str:
    return f"approval:{call_id}"


def unapproved(run: Run, task: Task, ctx: ExecutorContext, calls: Sequence[ToolCallRecord]) -> int:
    """Index of the first call in ``calls`` that must wait for approval; len(calls) if none."""
    required = ctx.agent(task.agent).require_approval
    approved = set(run.state.approved_calls)
    for index, call in enumerate(calls):
        if call.name in required and call.call_id not in approved:
            return index
    return len(calls)


async def ask(run: Run, task: Task, ctx: ExecutorContext, call: ToolCallRecord) -> Next:
    """Post what the call will do and park until someone answers."""
    if task.origin_thread_ref is None or task.parent_id is not None:
        return _unaskable(run, task, ctx, call)
    preview = await _preview(task, ctx, call)
    body = ask_text(call, preview)
    now = ctx.clock.now()

    thread = task.origin_thread_ref

    def post(session: Transaction) -> None:
        outbox.enqueue_post(
            session,
            task_id=task.task_id,
            purpose="approval",
            thread=thread,
            key=approval_key(call.call_id),
            action="post",
            body=body,
            now=now,
            actions=approval_actions(call.call_id),
        )
        ctx.reporter.on_phase(session, task, "await_approval", f"waiting for approval: {call.name}")

    question = ApprovalAsk(call.call_id, call.name, task.mailbox_seq, body)
    replay = run.state.mailbox_replay_from
    state = replace(
        run.state,
        approval_ask=question,
        mailbox_replay_from=run.mailbox_position if replay is None else replay,
    )
    return goto(run, "await_approval", state=state, writes=(post,), after="wait")


def _unaskable(run: Run, task: Task, ctx: ExecutorContext, call: ToolCallRecord) -> Next:
    """A delegated task (or one with no thread) has nobody to ask: replies reach the task
    that owns the thread. The call is refused, so the model can leave it to that task."""
    output = (
        f"not run: {call.name} needs a person's approval, and only the task that owns the "
        "conversation can ask for it; report back and let that task do it"
    )
    now = ctx.clock.now()

    def refuse(session: Transaction) -> None:
        result = {"output": output, "is_error": True}
        tool_calls.settle(
            session, task.task_id, call.call_id, outcome="rejected", result=result, now=now
        )

    return goto(run, "dispatch_tools", writes=(refuse,))


def approval_actions(call_id: str) -> tuple[Action, Action]:
    """Approve and Reject buttons; a click is the reply, naming its call."""
    return (
        Action(name=APPROVE, label="Approve", value=call_id, style="primary"),
        Action(name=REJECT, label="Reject", value=call_id, style="danger"),
    )


def ask_text(call: ToolCallRecord, preview: str) -> str:
    return (
        f"✋ Approval needed before `{call.name}`:\n{preview}\n"
        "Reply `approve` (or react ✅) to let exactly this go ahead, or `reject <reason>`."
    )


async def _preview(task: Task, ctx: ExecutorContext, call: ToolCallRecord) -> str:
    tool = ctx.tools_for(task.agent).get(call.name)
    if isinstance(tool, Previewable):
        workspace = await ctx.workspace_for(task)
        tool_ctx = ToolContext(task.task_id, task.root_id, call.call_id, task.depth, workspace)
        try:
            return await tool.preview(call.args, tool_ctx)
        except Exception as e:  # boundary: a failed preview still asks, with the arguments
            return f"{describe_args(call.args)}\n(preview failed: {type(e).__name__}: {e})"
    return describe_args(call.args)


def describe_args(args: dict[str, Any]) -> str:
    lines = []
    for name, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"*{name}*: {_clip(text)}")
    return "\n".join(lines) or "(no arguments)"


def _clip(text: str, limit: int = 1500) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def await_approval(run: Run, task: Task, ctx: ExecutorContext) -> Next:
    """Ticked by a reply, a stop, or a stale wake-up."""
    if run.stop_requested:
        return goto(run, "dispatch_tools")  # it cancels the unstarted calls
    question = run.state.approval_ask
    if question is None or task.mailbox_seq <= run.mailbox_position:
        return goto(run, "await_approval", after="wait")
    messages = await ctx.scheduler.read_mailbox(task.task_id, after=run.mailbox_position)
    if not messages:
        return goto(run, "await_approval", after="wait")
    for message in messages:
        fresh = message.seq > question.after
        answer = approval_of(message.text, question.call_id) if fresh else None
        if answer is not None:
            return _answered(run, task, ctx, question, message, answer)
    return goto(run, "await_approval", mailbox_position=messages[-1].seq, after="wait")


def _answered(
    run: Run,
    task: Task,
    ctx: ExecutorContext,
    question: ApprovalAsk,
    message: MailboxMessage,
    answer: Approval,
) -> Next:
    call_id, name, asked = question.call_id, question.name, question.body
    sender = message.sender
    who = (sender.name if sender else None) or message.author or "someone"
    state = replace(run.state, approval_ask=None)
    now = ctx.clock.now()
    if answer.verdict == APPROVE:
        state = replace(state, approved_calls=(*state.approved_calls, call_id))

        def approved(session: Transaction) -> None:
            # The outcome takes the place of the buttons, so nobody answers twice.
            outbox.set_body(session, approval_key(call_id), f"{asked}\n✅ Approved by {who}.", ())
            ctx.reporter.on_phase(session, task, "dispatch_tools", f"{name} approved by {who}")

        return goto(
            run, "dispatch_tools", state=state, mailbox_position=message.seq, writes=(approved,)
        )
    reason = answer.reason or "no reason given"
    output = f"rejected: {who} did not approve this {name} call: {reason}. It was not run."

    def rejected(session: Transaction) -> None:
        result = {"output": output, "is_error": True}
        tool_calls.settle(
            session, task.task_id, call_id, outcome="rejected", result=result, now=now
        )
        outbox.set_body(session, approval_key(call_id), f"{asked}\n❌ Rejected by {who}.", ())
        ctx.reporter.on_phase(session, task, "dispatch_tools", f"{name} rejected by {who}")

    return goto(
        run, "dispatch_tools", state=state, mailbox_position=message.seq, writes=(rejected,)
    )


def replay_position(run: Run) -> int:
    """Where check_scheduler reads the mailbox from: before any reply read while parked."""
    replay = run.state.mailbox_replay_from
    return run.mailbox_position if replay is None else min(replay, run.mailbox_position)


def after_turn(state: RunState) -> RunState:
    """The run state once a turn's approvals are over."""
    return replace(state, approval_ask=None, approved_calls=(), mailbox_replay_from=None)
