"""A model provider outage over the OpenAI wire, on a clock the test moves: running tasks park
(``waiting``, no worker held) and resume instead of failing, each thread is told once, a
restart in the middle changes nothing, and an outage past ``outage_give_up_s`` ends the task
with a reply that says so without quoting the provider's address or its page."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

from runtime.clock import ManualClock
from runtime.ids import TaskId
from runtime.models.openai import OpenAIProvider
from runtime.reporting import ThreadReporter
from runtime.store import executions
from runtime.store.records import Task, TaskStatus
from runtime.threads import SlackThread
from tests.factories import make_spec
from tests.harness import Stack, agent, build_stack
from tests.integration import test_openai_provider as wire
from tests.integration.test_openai_provider import (
    GATEWAY_PAGE,
    CompletionsServer,
    Reply,
    completion,
    error,
)

# The loopback chat-completions server and its per-test reset, as fixtures of this module.
running_server = wire.running_server
llm = wire.llm

STEP_S = 5.0  # how far the clock moves per look


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


def _stack(db_url: str, folder: Path, llm: CompletionsServer, clock: ManualClock) -> Stack:
    provider = OpenAIProvider(
        llm.base_url, "gpt-4o-mini", api_key="sk-test", max_retries=1, sleep=_no_wait
    )
    stack = build_stack(
        db_url, folder, provider, agents={"default": agent([])}, clock=clock, lease_seconds=3600
    )
    stack.ctx.reporter = ThreadReporter(clock)
    return stack


async def _schedule(stack: Stack, count: int) -> list[TaskId]:
    found: list[TaskId] = []
    for n in range(count):
        thread = SlackThread("T1", "C1", f"1700000000.00010{n}")
        spec = make_spec(origin_thread_ref=thread, objective_key=str(thread))
        found.append((await stack.scheduler.transact(stack.scheduler.schedule, spec)).task.task_id)
    return found


async def _tasks(stack: Stack, task_ids: Sequence[str]) -> list[Task]:
    found = [await stack.scheduler.get(task_id) for task_id in task_ids]
    assert all(task is not None for task in found)
    return [task for task in found if task is not None]


async def _move_clock_until(
    clock: ManualClock, done: Callable[[], Awaitable[bool]], timeout: float = 60
) -> None:
    async with asyncio.timeout(timeout):
        while not await done():
            clock.advance(STEP_S)
            await asyncio.sleep(0.05)


async def _all_done(stack: Stack, task_ids: Sequence[str]) -> bool:
    for task_id in task_ids:
        run = await stack.db.read(partial(executions.load_run, task_id=task_id))
        if run is None or run.phase != "done":
            return False
    return True


async def _all_waiting(stack: Stack, task_ids: Sequence[str]) -> bool:
    return all(t.status is TaskStatus.waiting for t in await _tasks(stack, task_ids))


async def test_no_task_fails_and_each_thread_is_told_once_when_the_model_answers_500_for_5_minutes(
    llm: CompletionsServer, db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    llm.otherwise = error(500, "The server had an error while processing your request.")
    stack = _stack(db_url, tmp_path, llm, clock)
    task_ids = await _schedule(stack, 3)
    back_at = clock.now() + timedelta(minutes=5)
    async with stack.working(concurrency=3):
        # A few quick retries, then each task parks, holding no worker.
        await _move_clock_until(clock, lambda: _all_waiting(stack, task_ids))
        await _move_clock_until(clock, _after(clock, back_at - timedelta(minutes=3)))
    stack.db.close()
    # A restart mid-outage: a new process reads where each task stands from the database.
    stack = _stack(db_url, tmp_path, llm, clock)
    async with stack.working(concurrency=3):
        await _move_clock_until(clock, _after(clock, back_at))
        assert not any(t.status.is_terminal for t in await _tasks(stack, task_ids))
        asked_in_outage = len(llm.received)
        llm.otherwise = completion({"content": "Fixed: the test passes now."})
        await _move_clock_until(clock, lambda: _all_done(stack, task_ids))
    for task in await _tasks(stack, task_ids):
        assert task.status is TaskStatus.succeeded, task.result
        history = [change.status for change in await stack.scheduler.history(task.task_id)]
        assert TaskStatus.waiting in history and TaskStatus.failed not in history
        [notice] = await stack.posts(task.task_id, "model_outage")
        assert "model provider is failing" in notice.body
        [reply] = await stack.posts(task.task_id, "completion")
        assert reply.body.startswith("✅") and "Fixed: the test passes now." in reply.body
    # Parked tasks try again at growing intervals: 5 minutes cost each a handful of calls.
    assert asked_in_outage <= 3 * 2 * 10, asked_in_outage
    stack.db.close()


def _after(clock: ManualClock, moment: datetime) -> Callable[[], Awaitable[bool]]:
    async def passed() -> bool:
        return clock.now() >= moment

    return passed


async def test_the_task_ends_saying_the_provider_was_down_when_the_outage_outlasts_the_limit(
    llm: CompletionsServer, db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    llm.otherwise = Reply(status=502, body=GATEWAY_PAGE, headers={"content-type": "text/html"})
    stack = _stack(db_url, tmp_path, llm, clock)
    stack.ctx.outage_give_up_s = 600
    [task_id] = await _schedule(stack, 1)
    started = clock.now()
    async with stack.working():
        await _move_clock_until(clock, lambda: _all_done(stack, [task_id]))
    [task] = await _tasks(stack, [task_id])
    assert task.status is TaskStatus.failed
    assert task.result is not None and task.result["outcome"] == "model_unavailable"
    assert clock.now() - started >= timedelta(seconds=600)
    [reply] = await stack.posts(task_id, "completion")
    assert "The model provider was unavailable for 10 minutes" in reply.body
    assert "HTTP 502" in reply.body and "HTML page" in reply.body
    for leaked in ("127.0.0.1", llm.base_url, "corp.internal", "<"):
        assert leaked not in reply.body
    assert len(await stack.posts(task_id, "model_outage")) == 1
    stack.db.close()


async def test_an_html_200_is_retried_and_the_task_succeeds_without_a_notice(
    llm: CompletionsServer, db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    llm.queue(Reply(body=GATEWAY_PAGE), Reply(body=GATEWAY_PAGE), completion({"content": "ok"}))
    stack = _stack(db_url, tmp_path, llm, clock)
    [task_id] = await _schedule(stack, 1)
    async with stack.working():
        await _move_clock_until(clock, lambda: _all_done(stack, [task_id]))
    [task] = await _tasks(stack, [task_id])
    assert task.status is TaskStatus.succeeded, task.result
    assert len(llm.received) == 3
    assert await stack.posts(task_id, "model_outage") == []
    stack.db.close()


async def test_a_stop_ends_a_task_parked_by_an_outage_without_waiting_for_the_provider(
    llm: CompletionsServer, db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    llm.otherwise = error(503, "overloaded")
    stack = _stack(db_url, tmp_path, llm, clock)
    [task_id] = await _schedule(stack, 1)
    async with stack.working():
        await _move_clock_until(clock, lambda: _all_waiting(stack, [task_id]))
        asked = len(llm.received)
        await stack.scheduler.transact(stack.scheduler.request_cancel, task_id, "stop", "U1")
        await stack.ended(task_id)
    [task] = await _tasks(stack, [task_id])
    assert task.status is TaskStatus.canceled
    assert len(llm.received) == asked
    stack.db.close()


async def test_the_task_parks_at_once_when_the_provider_asks_for_a_long_wait(
    llm: CompletionsServer, db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    llm.otherwise = error(429, "Rate limit reached", **{"Retry-After": "120"})
    stack = _stack(db_url, tmp_path, llm, clock)
    [task_id] = await _schedule(stack, 1)
    async with stack.working():
        await _move_clock_until(clock, lambda: _all_waiting(stack, [task_id]))
        assert len(llm.received) == 1  # no retry sooner than asked, in the call or after it
        llm.otherwise = completion({"content": "ok"})
        await _move_clock_until(clock, lambda: _all_done(stack, [task_id]))
    [task] = await _tasks(stack, [task_id])
    assert task.status is TaskStatus.succeeded, task.result
    assert len(await stack.posts(task_id, "model_outage")) == 1
    stack.db.close()
