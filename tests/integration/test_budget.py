"""Budgets that ask: a task that spends its max_cost_usd parks, asks its thread once, and
goes on, stops or times out as its thread answers, on a real database."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runtime.answers import budget_answer_of
from runtime.config import ModelPrice
from runtime.executor.accounting import Accounting
from runtime.scheduler import Appended, Duplicate
from runtime.store import deliveries, executions, outbox, transcripts, usage
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part
from tests.harness import Stack, agent, build_stack, until

TURNS = 40
PRICE = ModelPrice(input_per_million=1_000.0, output_per_million=1_000.0)  # ~$0.2 a call


def script() -> dict[str, Any]:
    turns = [
        {"say": f"step {n}", "tool_calls": [{"name": "lookup", "args": {"key": f"k{n}"}}]}
        for n in range(TURNS)
    ]
    return {"scripts": [{"turns": [*turns, {"say": "all done"}]}]}


def budget_stack(db_url: str, folder: Path, **limits: Any) -> Stack:
    agents = {"default": agent(["lookup"], max_cost_usd=1.0, max_turns=100, **limits)}
    stack = build_stack(db_url, folder, script(), agents=agents)
    stack.ctx.accounting = Accounting("scripted", {"scripted": PRICE})
    return stack


async def _asks(stack: Stack, task_id: str) -> list[outbox.OutboxPost]:
    return await stack.posts(task_id, "budget")


async def _parked(stack: Stack, task_id: str, asks: int) -> bool:
    run = await stack.db.read(lambda s: executions.load_run(s, task_id))
    task = await stack.scheduler.get(task_id)
    if run is None or run.phase != "await_budget" or task is None:
        return False
    return task.status is TaskStatus.waiting and len(await _asks(stack, task_id)) >= asks


async def test_task_parks_asks_once_resumes_on_continue_and_ends_on_stop_when_over_budget(
    db_url: str, tmp_path: Path
) -> None:
    stack = budget_stack(db_url, tmp_path)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    async with stack.working():
        await until(lambda: _parked(stack, task.task_id, 1))
        spent = await stack.db.read(lambda s: usage.task_totals(s, task.task_id))
        assert 1.0 <= spent.cost_usd < 2.0
        # A stale wake-up (a recovery, a duplicate timer) parks again without asking again.
        now = stack.ctx.clock.now()
        await stack.db.run(lambda s: deliveries.add_delivery(s, task.task_id, "tick", now, now))
        await asyncio.sleep(0.5)
        await until(lambda: _parked(stack, task.task_id, 1))
        [ask] = await _asks(stack, task.task_id)
        assert "reached its budget of $1.00" in ask.body and "reply `continue`" in ask.body.lower()
        assert "So far: lookup ×" in ask.body

        first = await stack.scheduler.transact(
            stack.scheduler.append_mailbox,
            task.task_id,
            "slack:reply-1",
            [text_part("<@U0KEEL> continue please")],
        )
        again = await stack.scheduler.transact(
            stack.scheduler.append_mailbox,
            task.task_id,
            "slack:reply-1",
            [text_part("<@U0KEEL> continue please")],
        )
        assert isinstance(first, Appended) and isinstance(again, Duplicate)
        await until(lambda: _parked(stack, task.task_id, 2))
        spent = await stack.db.read(lambda s: usage.task_totals(s, task.task_id))
        assert 2.0 <= spent.cost_usd < 3.0  # one grant: one more budget, not two
        await stack.scheduler.transact(
            stack.scheduler.append_mailbox, task.task_id, "slack:reply-2", [text_part("stop")]
        )
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.canceled
    assert final.result is not None and final.result["outcome"] == "budget_stopped"
    assert "$2.00" in final.result["summary"]
    assert [a.key for a in await _asks(stack, task.task_id)] == [
        f"budget:{task.task_id}:0",
        f"budget:{task.task_id}:1",
    ]


async def test_task_ends_as_budget_exhausted_with_its_summary_when_nobody_answers(
    db_url: str, tmp_path: Path
) -> None:
    stack = budget_stack(db_url, tmp_path, budget_answer_s=1.0)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    async with stack.working():
        await until(lambda: _parked(stack, task.task_id, 1))
        # A remark that is no answer is read, and the task stays parked.
        await stack.scheduler.transact(
            stack.scheduler.append_mailbox, task.task_id, "slack:r", [text_part("hmm, why?")]
        )
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.failed
    assert final.result is not None and final.result["outcome"] == "budget_exhausted"
    assert "without an answer" in final.result["summary"]
    assert "So far: lookup ×" in final.result["summary"]
    entries = await stack.db.read(lambda s: transcripts.transcript(s, task.task_id))
    assert any("hmm, why?" in str(e.payload.get("text")) for e in entries)


def test_answer_is_the_first_word_after_a_mention_when_replies_are_read() -> None:
    assert budget_answer_of("<@U0KEEL> Continue.") == "continue"
    assert budget_answer_of("stop") == "stop"
    assert budget_answer_of("@keel continue with the plan") == "continue"
    assert budget_answer_of("please do not continue") is None
    assert budget_answer_of("") is None


async def test_resident_role_budget_counts_each_event_alone_when_it_lives_on(
    db_url: str, tmp_path: Path
) -> None:
    lookup = {"name": "lookup", "args": {"key": "ci"}}
    turns = [{"tool_calls": [lookup]}, {"say": "handled one"}] * 2
    stack = build_stack(db_url, tmp_path, {"scripts": [{"turns": turns}]})
    stack.ctx.accounting = Accounting("scripted", {"scripted": PRICE})
    stack.ctx.agents = {"default": agent(["lookup"])}
    stack.ctx.resident = {"default": 3600.0}
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task

    async def idle(turn: int) -> bool:
        run = await stack.db.read(lambda s: executions.load_run(s, task.task_id))
        return run is not None and run.phase == "await_input" and run.turn == turn

    async with stack.working():
        await until(lambda: idle(1))
        first = await stack.db.read(lambda s: usage.task_totals(s, task.task_id))
        # Below what both events cost before the second one's last call; above either alone.
        budget = round(first.cost_usd * 1.3, 4)
        stack.ctx.agents = {"default": agent(["lookup"], max_cost_usd=budget)}
        await stack.scheduler.transact(
            stack.scheduler.append_mailbox, task.task_id, "ev-2", [text_part("CI failed")]
        )
        await until(lambda: idle(3))
    spent = await stack.db.read(lambda s: usage.task_totals(s, task.task_id))
    assert spent.cost_usd > budget
    assert await _asks(stack, task.task_id) == []
