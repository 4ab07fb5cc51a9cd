"""Budgets that ask: a task that has spent its ``limits.max_tokens`` or ``max_cost_usd``
parks (``waiting``) and asks its thread, once, whether to go on.

A tree's budget (``max_tree_tokens``, ``max_tree_cost_usd`` of its root's agent) does not
ask: it bounds what delegation may spend in all, so each task of a tree that has spent it
ends at the limit (``tree_limit``).

The ask is an outbox post keyed by the task and the number of grants so far, so a
redelivered tick or a restarted worker never asks twice for the same budget. A mailbox
``continue`` grants one more budget (each reply is its own mailbox item, so a redelivered
reply grants nothing twice); ``stop`` ends the task; silence until ``budget_answer_s``
ends it as ``budget_exhausted`` with what it did. Who may answer is routing's decision:
only an authorised person's reply reaches the mailbox.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from runtime.answers import CONTINUE, budget_answer_of
from runtime.config import AgentLimits
from runtime.execution import BudgetAsk, BudgetEnd, Limit
from runtime.executor import brief, fitting, wip
from runtime.executor.context import ExecutorContext, Transition, Write, goto
from runtime.reporting import stop_action
from runtime.store import executions, ledger, links, outbox, transcripts, usage
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import MailboxMessage, Task
from runtime.store.transcripts import TranscriptEntry
from runtime.store.usage import UsageTotals
from runtime.surfaces import Action


def budget_key(task_id: str, grants: int) -> str:
    return f"budget:{task_id}:{grants}"


async def check(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["await_budget"]] | None:
    """Park and ask if the task has spent its budget; None while it has not."""
    limits = ctx.agent(task.agent).limits
    if limits.max_tokens is None and limits.max_cost_usd is None:
        return None
    since = _activation_since(run)
    spent = await ctx.db.read(lambda s: usage.task_totals(s, task.task_id, since=since))
    grants = run.state.budget_grants
    reached = reached_budget(limits, spent, grants)
    if reached is None:
        return None
    entries = await ctx.db.read(lambda s: transcripts.transcript(s, task.task_id))
    saved = await wip.save_work(task, ctx, wip.budget_ending(grants))
    until = ctx.clock.now() + timedelta(seconds=limits.budget_answer_s)
    progress = progress_text(spent, entries)
    if saved is not None:
        progress += f"\n{saved.note}"
    body = ask_text(reached, progress, limits)
    ask = BudgetAsk(grants, until, reached, progress)
    now = ctx.clock.now()

    def post(session: Transaction) -> None:
        for item in saved.evidence if saved is not None else ():
            ledger.add_evidence(session, task.task_id, task.root_id, None, item, now)
            links.record_evidence(session, task.task_id, task.root_id, item, now)
        if task.origin_thread_ref is not None and task.parent_id is None:
            outbox.enqueue_post(
                session,
                task_id=task.task_id,
                purpose="budget",
                thread=task.origin_thread_ref,
                key=budget_key(task.task_id, grants),
                action="post",
                body=body,
                now=now,
                actions=(continue_action(task.task_id), stop_action(task.task_id)),
            )
        ctx.reporter.on_phase(session, task, "await_budget", "paused at its budget")

    state = replace(run.state, budget_ask=ask)
    return goto(run, "await_budget", state=state, writes=(post,), after="wait", wake_at=until)


async def tree_limit(task: Task, ctx: ExecutorContext) -> Limit | None:
    """The tree budget of the task's root's agent, once the tree has spent it; a resident
    root's tree counts from the root's current activation."""
    root = task if task.parent_id is None else await ctx.scheduler.get(task.root_id)
    if root is None:
        return None
    limits = ctx.agent(root.agent).limits
    if limits.max_tree_tokens is None and limits.max_tree_cost_usd is None:
        return None

    def spent(session: Transaction) -> UsageTotals:
        root_run = executions.load_run(session, task.root_id)
        since = _activation_since(root_run) if root_run is not None else None
        return usage.tree_totals(session, task.root_id, since=since)

    totals = await ctx.db.read(spent)
    if limits.max_tree_cost_usd is not None and totals.cost_usd >= limits.max_tree_cost_usd:
        return Limit("max_tree_cost_usd", limits.max_tree_cost_usd)
    if limits.max_tree_tokens is not None and totals.total_tokens >= limits.max_tree_tokens:
        return Limit("max_tree_tokens", limits.max_tree_tokens)
    return None


def _activation_since(run: Run) -> datetime | None:
    """A resident role's budget counts per event, like its other limits; a task's, whole."""
    activation = run.state.activation
    return activation.since if activation is not None else None


def continue_action(task_id: str) -> Action:
    """The Continue button under the question: a click is the reply ``continue``."""
    return Action(name=CONTINUE, label="Continue", value=task_id, style="primary")


def reached_budget(limits: AgentLimits, spent: UsageTotals, grants: int) -> str | None:
    """Which budget ``spent`` has reached, with ``grants`` extra budgets allowed."""
    allowed = grants + 1
    if limits.max_cost_usd is not None and spent.cost_usd >= limits.max_cost_usd * allowed:
        return f"${limits.max_cost_usd * allowed:.2f}"
    if limits.max_tokens is not None and spent.total_tokens >= limits.max_tokens * allowed:
        return f"{limits.max_tokens * allowed:,} tokens"
    return None


def progress_text(spent: UsageTotals, entries: Sequence[TranscriptEntry]) -> str:
    """What the task has done so far and its latest step, from its transcript."""
    calls = Counter(e.payload.get("name", "?") for e in entries if e.kind == "tool_call")
    done = ", ".join(f"{name} ×{n}" for name, n in calls.most_common(6)) or "no tool calls yet"
    said = [
        str(e.payload.get("text", ""))
        for e in entries
        if e.kind == "message" and e.payload.get("type") == "assistant_text"
    ]
    summaries = [str(e.payload.get("text", "")) for e in entries if e.kind == fitting.SUMMARY_KIND]
    lines = [
        f"Spent {spent.total_tokens:,} tokens, ${spent.cost_usd:.2f}, {spent.turns} turns.",
        f"So far: {done}.",
    ]
    if summaries:
        lines.append(f"Summary: {_clip(summaries[-1])}")
    if said:
        lines.append(f"Latest step: {_clip(said[-1])}")
    return "\n".join(lines)


def ask_text(reached: str, progress: str, limits: AgentLimits) -> str:
    more = " or ".join(
        part
        for part in (
            f"${limits.max_cost_usd:.2f}" if limits.max_cost_usd is not None else "",
            f"{limits.max_tokens:,} tokens" if limits.max_tokens is not None else "",
        )
        if part
    )
    hours = limits.budget_answer_s / 3600
    return (
        f"⏸️ Paused: this task reached its budget of {reached}.\n{progress}\n"
        f"Reply `continue` to allow another {more}, or `stop`. Without an answer within "
        f"{hours:g}h it ends here."
    )


def _clip(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def await_budget(
    run: Run, task: Task, ctx: ExecutorContext
) -> Transition[Literal["await_budget", "check_scheduler", "report_failure", "report_stopped"]]:
    """Ticked by a reply, a stop, the answer timer, or a stale wake-up."""
    if run.stop_requested:
        return goto(run, "report_stopped")
    ask = run.state.budget_ask
    if ask is None:  # a stale wake-up after the question was answered
        return goto(run, "check_scheduler")
    until = ask.until
    if task.mailbox_seq > run.mailbox_position:
        messages = await ctx.scheduler.read_mailbox(task.task_id, after=run.mailbox_position)
        if messages:
            return await _answered(run, task, ctx, messages, until)
    if ctx.clock.now() >= until:
        ended = BudgetEnd("budget_exhausted", _exhausted(ask))
        return goto(run, "report_failure", state=replace(run.state, budget_ended=ended))
    return goto(run, "await_budget", after="wait", wake_at=until)


async def _answered(
    run: Run,
    task: Task,
    ctx: ExecutorContext,
    messages: Sequence[MailboxMessage],
    until: datetime,
) -> Transition[Literal["await_budget", "check_scheduler", "report_failure"]]:
    """The replies enter the transcript; the first ``continue`` or ``stop`` decides."""
    answer, position = None, messages[-1].seq
    for message in messages:
        answer = budget_answer_of(message.text)
        if answer is not None:
            position = message.seq  # later replies are read after resuming
            break
    shown = [m for m in messages if m.seq <= position]
    items = await brief.follow_up_items(ctx, task, shown)
    now = ctx.clock.now()

    def write(session: Transaction) -> None:
        transcripts.add_transcript_items(session, task.task_id, items, now)

    writes: tuple[Write, ...] = (write,)
    state = run.state
    match answer:
        case "continue":
            granted = replace(state, budget_ask=None, budget_grants=state.budget_grants + 1)
            return goto(
                run, "check_scheduler", state=granted, mailbox_position=position, writes=writes
            )
        case "stop":
            ended = BudgetEnd("budget_stopped", _stopped(state.budget_ask))
            stopped = replace(state, budget_ended=ended)
            return goto(
                run, "report_failure", state=stopped, mailbox_position=position, writes=writes
            )
        case None:
            return goto(
                run,
                "await_budget",
                state=state,
                mailbox_position=position,
                writes=writes,
                after="wait",
                wake_at=until,
            )


def _exhausted(ask: BudgetAsk) -> str:
    return f"Ended at its budget of {ask.reached} without an answer.\n{ask.progress}"


def _stopped(ask: BudgetAsk | None) -> str:
    reached, progress = (ask.reached, ask.progress) if ask else ("its budget", "")
    return f"Stopped at its budget of {reached} on request.\n{progress}"
