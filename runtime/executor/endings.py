"""How a task that ends without its answer hands its work on: a stop, the deadline, a limit,
a failure or a budget. Its uncommitted changes are saved to its branch (``wip``), and the
reply says where (``detail["saved"]``: branch and commit), or why the save failed; an
account of what was done and what remains is asked of the agent's model in one bounded call
with no tools (its usage recorded like any call), else made from the transcript.

Only a root task with a workspace hands on: a child's parent reads its result, and a task
with no checkout has nothing to save. A failed save or account never fails the ending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from runtime.execution import RunState
from runtime.executor import budget, compaction, fitting, outage, wip
from runtime.executor.context import ExecutorContext, Write
from runtime.models.base import AssistantText, ModelRequest
from runtime.store import ledger, links, transcripts, usage
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import Task, TaskResult, TaskStatus
from runtime.store.usage import ModelCall

log = logging.getLogger(__name__)

ACCOUNT_SYSTEM = (
    "The engineering agent whose work is below has stopped before finishing. Write a short "
    "account for whoever picks the work up: what was done (files changed, commands and their "
    "outcomes, commits, pull requests) and what remains to do. Plain sentences, at most ten "
    "lines. Keep exact names, paths and numbers. Do not call tools."
)
# The account is a few lines: its reply is bounded well below a turn's.
ACCOUNT_TOKENS = 512
# The ending waits this long for the account, then writes it from the transcript.
ACCOUNT_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Ended:
    """How the task ended: its result, the ending its save is keyed by, and whether to ask
    for an account (not when the summary already tells the progress, as a budget's does, or
    when the model is known to be down)."""

    result: TaskResult
    ending: wip.Ending
    account: bool = True


def of_failure(state: RunState) -> Ended:
    """The ending ``report_failure`` reports: a budget's, a limit's, or a failure's."""
    limit, error, spent = state.limit, state.error, state.budget_ended
    if spent is not None:
        status = TaskStatus.canceled if spent.outcome == "budget_stopped" else TaskStatus.failed
        result = TaskResult(status, spent.summary, {"outcome": spent.outcome})
        return Ended(result, wip.Ending(spent.outcome, "ended at its budget"), account=False)
    if limit is not None:
        summary = f"stopped at a limit: {limit.name} ({limit.value})"
        result = TaskResult(TaskStatus.failed, summary, {"outcome": f"limit:{limit.name}"})
        reason = f"stopped at its limit {limit.name}"
        return Ended(result, wip.Ending(f"limit-{limit.name}", reason))
    if error is not None and error.kind == outage.GAVE_UP:
        detail = {"outcome": "model_unavailable", "error": error.to_json()}
        result = TaskResult(TaskStatus.failed, error.message, detail)
        ending = wip.Ending("model_unavailable", "its model was unavailable")
        return Ended(result, ending, account=False)
    if error is not None:
        summary = f"failed in {error.phase}: {error.message}"
        detail = {"outcome": "error", "error": error.to_json()}
        result = TaskResult(TaskStatus.failed, summary, detail)
        return Ended(result, wip.Ending("failed", f"failed in {error.phase}"))
    unknown = {"outcome": "error", "error": {}}
    result = TaskResult(TaskStatus.failed, "failed in unknown phase: ", unknown)
    return Ended(result, wip.Ending("failed", "failed"))


@dataclass(frozen=True, slots=True)
class HandedOn:
    """The result the ending reports, and the rows to write with it."""

    result: TaskResult
    writes: tuple[Write, ...] = ()


async def hand_on(run: Run, task: Task, ctx: ExecutorContext, ended: Ended) -> HandedOn:
    """The ending's result with the saved work and the account added."""
    result = ended.result
    if task.parent_id is not None or not await _has_workspace(task, ctx):
        return HandedOn(result)
    saved = await wip.save_work(task, ctx, ended.ending)
    told, call = await _account(run, task, ctx) if ended.account else (None, None)
    paragraphs = [result.summary, *(p for p in (told, saved.note if saved else None) if p)]
    detail: dict[str, Any] = dict(result.detail)
    if saved is not None and saved.pushed:
        detail["saved"] = {"branch": saved.branch, "commit": saved.commit}
    elif saved is not None:
        detail["save_failed"] = saved.note
    handed = replace(result, summary="\n\n".join(paragraphs), detail=detail)
    evidence = saved.evidence if saved is not None else ()
    now = ctx.clock.now()

    def write(session: Transaction) -> None:
        for item in evidence:
            ledger.add_evidence(session, task.task_id, task.root_id, None, item, now)
            links.record_evidence(session, task.task_id, task.root_id, item, now)
        if call is not None:
            usage.record_call(session, task.task_id, task.root_id, call, now)

    return HandedOn(handed, (write,))


async def _has_workspace(task: Task, ctx: ExecutorContext) -> bool:
    try:
        return await ctx.workspace_for(task) is not None
    except Exception as e:  # the ending goes on without a checkout it cannot reach
        log.warning("task %s ends without its workspace: %s", task.task_id, e)
        return False


async def _account(
    run: Run, task: Task, ctx: ExecutorContext
) -> tuple[str, ModelCall | None]:
    """The model's account of the work, with its call; the transcript's when it fails."""
    entries = await ctx.db.read(lambda s: transcripts.transcript(s, task.task_id))
    model = ctx.model_for(task.agent)
    # Everything is summarised, the last turn too: nothing follows this call.
    window = replace(model.window, keep_turns=0)
    fitted = fitting.fit(
        entries,
        fixed_chars=len(ACCOUNT_SYSTEM),
        window=window,
        chars_per_token=compaction.chars_per_token(run),
        force_compaction=True,
    )
    if fitted.compaction is not None:
        request = ModelRequest(
            task_id=task.task_id,
            turn=run.turn,
            system=ACCOUNT_SYSTEM,
            items=fitted.compaction.items,
            purpose="compaction",  # a summary: no tools, no scripted turn
            max_tokens=min(ACCOUNT_TOKENS, model.window.reply_tokens),
        )
        started = time.monotonic()
        try:
            async with asyncio.timeout(ACCOUNT_TIMEOUT_S):
                response = await model.provider.complete(request)
        except Exception:  # any failure of the account falls back: the ending goes on
            log.warning("no account of task %s from its model", task.task_id, exc_info=True)
        else:
            seconds = time.monotonic() - started
            ctx.observe_model_call("compaction", response.usage, seconds)
            key = f"ending:{run.turn}"
            call = model.accounting.call(key, "compaction", response.usage, seconds)
            said = "\n".join(i.text for i in response.items if isinstance(i, AssistantText))
            if said.strip():
                return f"What was done and what remains:\n{said.strip()}", call
            return await _mechanical(task, ctx, entries), call
    return await _mechanical(task, ctx, entries), None


async def _mechanical(
    task: Task, ctx: ExecutorContext, entries: Sequence[transcripts.TranscriptEntry]
) -> str:
    spent = await ctx.db.read(lambda s: usage.task_totals(s, task.task_id))
    return f"What was done:\n{budget.progress_text(spent, entries)}"
