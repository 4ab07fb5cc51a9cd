"""What a model call that failed transiently does next: retry soon, wait out an outage, or
give up.

A model provider outage (``ProviderUnavailable``: 5xx, 429, dropped connections, a 200 that
is not a completion) is not the task's fault. The call is tried again a few times seconds
apart; if the provider is still failing, the task parks (``waiting``, no worker held) and
tries again at growing intervals, and its thread is told once per outage. When the outage has
lasted ``outage_give_up_s`` since its first failure the task ends with a reply that says so.
Everything here is run state and outbox rows, so a restart mid-outage changes nothing.

Other ``Retryable`` failures of the model (a scripted model waiting to see a result) are
retried a bounded number of times, then fail the task.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from runtime.errors import ProviderUnavailable, Retryable
from runtime.execution import Failure
from runtime.executor.context import ExecutorContext, Transition, Write, goto
from runtime.store import outbox
from runtime.store.engine import Transaction
from runtime.store.executions import Run
from runtime.store.records import Task

MAX_MODEL_RETRIES = 8
# An outage: this many retries seconds apart before the task parks, then parks of 30 s
# doubling up to 5 minutes.
QUICK_RETRIES = 3
FIRST_PARK_S = 30.0
LONGEST_PARK_S = 300.0
# ``Failure.kind`` of a run that gave up waiting: its reply says so plainly.
GAVE_UP = "ProviderOutage"

Next = Transition[Literal["check_scheduler", "report_failure"]]


def retry_model(run: Run, task: Task, ctx: ExecutorContext, error: Retryable) -> Next:
    if isinstance(error, ProviderUnavailable):
        return _outage(run, task, ctx, error)
    return _retry(run, error)


def _retry(run: Run, error: Retryable) -> Next:
    retries = run.state.model_retries + 1
    if retries > MAX_MODEL_RETRIES:
        message = f"model provider kept failing after {MAX_MODEL_RETRIES} retries: {error}"
        return _failed(run, Failure("call_model", message))
    delay = error.retry_after_s if error.retry_after_s is not None else min(30.0, 0.2 * 2**retries)
    state = replace(run.state, model_retries=retries)
    # Back through the scheduler check, so input that arrives meanwhile is seen on the retry.
    return goto(run, "check_scheduler", state=state, after="delay", delay_s=delay)


def _outage(run: Run, task: Task, ctx: ExecutorContext, error: ProviderUnavailable) -> Next:
    now = ctx.clock.now()
    since = run.state.model_outage_since or now
    give_up_at = since + timedelta(seconds=ctx.outage_give_up_s)
    if now >= give_up_at:
        return _failed(run, Failure("call_model", gave_up_text(now - since, error), GAVE_UP))
    retries = run.state.model_retries + 1
    state = replace(run.state, model_retries=retries, model_outage_since=since)
    waited_s = wait_s(retries, error.retry_after_s)
    wake_at = min(now + timedelta(seconds=waited_s), give_up_at)
    if waited_s < FIRST_PARK_S:  # a quick retry (unless the provider asked for a long wait)
        delay_s = (wake_at - now).total_seconds()
        return goto(run, "check_scheduler", state=state, after="delay", delay_s=delay_s)
    tell = _tell_thread(task, ctx, since, now)
    # Parked like a task waiting for input: a reply or a stop wakes it before ``wake_at``.
    return goto(run, "check_scheduler", state=state, writes=(tell,), after="wait", wake_at=wake_at)


def wait_s(retries: int, retry_after_s: float | None) -> float:
    """Seconds until the next try: 2, 4, 8, then parks of 30 s doubling up to 5 minutes;
    never sooner than the provider asked."""
    if retries <= QUICK_RETRIES:
        backoff = 2.0**retries
    else:
        doublings = min(retries - QUICK_RETRIES - 1, 16)  # a long outage: no float overflow
        backoff = min(LONGEST_PARK_S, FIRST_PARK_S * 2.0**doublings)
    return max(backoff, retry_after_s or 0.0)


def outage_key(task_id: str, since: datetime) -> str:
    """One notice per task and outage, however often it parks or is redelivered."""
    return f"{task_id}:model-outage:{since.isoformat()}"


def _tell_thread(task: Task, ctx: ExecutorContext, since: datetime, now: datetime) -> Write:
    minutes = ctx.outage_give_up_s / 60

    def write(session: Transaction) -> None:
        ctx.reporter.on_phase(session, task, "call_model", "waiting for the model provider")
        if task.origin_thread_ref is None or task.parent_id is not None:
            return
        outbox.enqueue_post(
            session,
            task_id=task.task_id,
            purpose="model_outage",
            thread=task.origin_thread_ref,
            key=outage_key(task.task_id, since),
            action="post",
            body=notice_text(minutes),
            now=now,
        )

    return write


def notice_text(give_up_minutes: float) -> str:
    return (
        "⏸️ The model provider is failing right now, so this task is paused. I'll resume "
        f"when it is back, and give up if it is still failing after {give_up_minutes:g} "
        "minutes."
    )


def gave_up_text(lasted: timedelta, error: ProviderUnavailable) -> str:
    return (
        f"The model provider was unavailable for {_duration(lasted)}, so I stopped here "
        f"(last failure: {error}). What was done before it is below; ask again once the "
        "provider is back."
    )


def _duration(lasted: timedelta) -> str:
    seconds = lasted.total_seconds()
    if seconds < 120:
        return f"{seconds:.0f} seconds"
    return f"{seconds / 60:.0f} minutes"


def _failed(run: Run, failure: Failure) -> Transition[Literal["report_failure"]]:
    return goto(run, "report_failure", state=replace(run.state, error=failure))
