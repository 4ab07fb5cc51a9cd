"""The model call's context: the fitted request, the compaction call that a full window
needs, and what a provider's context-length refusal does (one compaction, then a retry).

A compaction's summary is a transcript item ``compact:<through seq>`` (kind ``summary``)
written with the call's usage in one commit; the next tick's request is fitted around it.
Killed before that commit, the restarted worker asks again and stores one summary; killed
after, it never asks again for the same items.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from runtime.execution import Failure, RunState
from runtime.executor import fitting
from runtime.executor.context import ExecutorContext, Transition
from runtime.executor.fitting import Compaction, Fitted, Window
from runtime.models.base import (
    AssistantText,
    ModelRequest,
    ModelResponse,
    ToolSpec,
    Usage,
)
from runtime.models.size import tools_chars
from runtime.store import transcripts, usage
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import Task
from runtime.store.transcripts import TranscriptEntry

SUMMARY_SYSTEM = (
    "You are summarising an engineering agent's work so far so that it can continue within "
    "its context window. Write a concise summary: the goal, what was done (files read and "
    "changed, commands and their outcomes, commits, pull requests), what was learnt, and "
    "what remains to do next. Keep exact names, paths, ids and numbers. Do not call tools."
)
# Run state: a context-length refusal asks for a compaction on the next fit, and counts per
# turn, so a turn the provider keeps refusing fails rather than compacting forever.
MAX_OVERFLOWS = 3


def chars_per_token(run: Run) -> float:
    value = run.state.chars_per_token
    return value if value is not None else fitting.DEFAULT_CHARS_PER_TOKEN


def fit_request(
    run: Run,
    window: Window,
    entries: Sequence[TranscriptEntry],
    system: str,
    tools: tuple[ToolSpec, ...],
) -> Fitted:
    return fitting.fit(
        entries,
        fixed_chars=len(system) + tools_chars(tools),
        window=window,
        chars_per_token=chars_per_token(run),
        force_compaction=run.state.compact_pending,
    )


def calibrated(run: Run, request_chars: int, reported: Usage | None) -> RunState:
    """The run state with the chars-per-token ratio the provider's count implies for a
    request of ``request_chars`` characters."""
    state = replace(run.state, model_retries=0, model_outage_since=None, compact_pending=False)
    if reported is not None and reported.prompt_tokens > 0:
        ratio = request_chars / reported.prompt_tokens
        state = replace(state, chars_per_token=round(min(8.0, max(1.0, ratio)), 4))
    return state


def after_overflow(
    run: Run, error: Exception
) -> Transition[Literal["call_model", "report_failure"]]:
    """The provider said the request is too long: compact once and ask again."""
    seen = run.state.context_overflows
    count = seen[1] if seen is not None and seen[0] == run.turn else 0
    if count >= MAX_OVERFLOWS:
        message = f"the request did not fit the model's window even after compaction: {error}"
        failure = replace(run.state, error=Failure("call_model", message))
        return Transition("report_failure", failure, run.turn, run.mailbox_position)
    # Our estimate was low: count more tokens per character from now on.
    state = replace(
        run.state,
        compact_pending=True,
        chars_per_token=round(chars_per_token(run) * 0.8, 4),
        context_overflows=(run.turn, count + 1),
    )
    return Transition("call_model", state, run.turn, run.mailbox_position)


async def compact(
    run: Run, task: Task, ctx: ExecutorContext, plan: Compaction
) -> Transition[Literal["call_model"]]:
    """Ask for the summary (a separate, recorded call) and persist it with its usage."""
    model = ctx.model_for(task.agent)
    request = ModelRequest(
        task_id=task.task_id,
        turn=run.turn,
        system=SUMMARY_SYSTEM,
        items=plan.items,
        purpose="compaction",
        max_tokens=model.window.reply_tokens,
    )
    started = time.monotonic()
    response = await model.provider.complete(request)
    seconds = time.monotonic() - started
    ctx.observe_model_call("compaction", response.usage, seconds)
    ctx.faults.hit("compaction:summarised")
    key = f"compact:{plan.through_seq}"
    payload = _payload(plan, response, run.turn)
    item = transcripts.NewItem(key, "user", fitting.SUMMARY_KIND, payload)
    call = model.accounting.call(key, "compaction", response.usage, seconds)
    now = ctx.clock.now()

    def write(session: Transaction) -> None:
        transcripts.add_transcript_items(session, task.task_id, [item], now)
        usage.record_call(session, task.task_id, task.root_id, call, now)
        ctx.reporter.on_phase(session, task, "call_model", "summarising the work so far")

    # An answer ends an outage: the next failure starts another.
    state = replace(run.state, compact_pending=False, model_retries=0, model_outage_since=None)
    return Transition("call_model", state, run.turn, run.mailbox_position, (write,))


def _payload(plan: Compaction, response: ModelResponse, turn: int) -> dict[str, Any]:
    text = "\n".join(i.text for i in response.items if isinstance(i, AssistantText)).strip()
    return {
        "type": "summary",
        "text": text or "(the model returned an empty summary)",
        "through_seq": plan.through_seq,
        "turn": turn,
    }
