"""The executor on a real database with the scripted model and test tools."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from runtime.executor import context, phase_table
from runtime.store import tool_calls, transcripts
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part
from tests.harness import ChildAware, Stack, agent, build_stack


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


async def _transcript_keys(stack: Stack, task_id: str) -> list[str]:
    entries = await stack.db.run(lambda s: transcripts.transcript(s, task_id))
    return [e.item_key for e in entries]


async def _calls(stack: Stack, task_id: str) -> list[tool_calls.ToolCallRecord]:
    return await stack.db.run(lambda s: tool_calls.all_calls(s, task_id))


def _settled_at(call: tool_calls.ToolCallRecord) -> datetime:
    assert call.settled_at is not None
    return call.settled_at


async def test_task_succeeds_with_final_text_when_script_reads_then_answers(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {
                        "say": "looking",
                        "tool_calls": [_call("lookup", key="a"), _call("lookup", key="b")],
                    },
                    {"expect_seen": ["value of a", "value of b"], "say": "a and b are known"},
                ]
            }
        ]
    }
    stack = build_stack(db_url, tmp_path, script)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded
    assert final.result is not None and final.result["summary"] == "a and b are known"
    keys = await _transcript_keys(stack, task.task_id)
    assert keys.index("result:call_0_0") < keys.index("result:call_0_1") < keys.index("model:1:0")


async def test_tool_results_enter_in_call_order_when_they_finish_out_of_order(
    db_url: str, tmp_path: Path
) -> None:
    calls = [_call("lookup", key="slow", sleep_s=0.3), _call("lookup", key="fast")]
    script = {"scripts": [{"turns": [{"tool_calls": calls}, {"say": "ok"}]}]}
    stack = build_stack(db_url, tmp_path, script)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    await stack.run_until_terminal(task.task_id)
    settled = sorted(await _calls(stack, task.task_id), key=_settled_at)
    assert [c.call_id for c in settled] == ["call_0_1", "call_0_0"]  # fast finished first
    keys = [k for k in await _transcript_keys(stack, task.task_id) if k.startswith("result:")]
    assert keys == ["result:call_0_0", "result:call_0_1"]


async def test_no_tick_starts_more_than_fanout_when_model_asks_for_many(
    db_url: str, tmp_path: Path
) -> None:
    calls = [_call("lookup", key=str(i)) for i in range(5)]
    script = {"scripts": [{"turns": [{"tool_calls": calls}, {"say": "ok"}]}]}
    stack = build_stack(db_url, tmp_path, script, agents={"default": agent(["lookup"], fanout=2)})
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    await stack.run_until_terminal(task.task_id)
    batches: dict[Any, int] = {}
    for call in await _calls(stack, task.task_id):
        batches[call.dispatched_at] = batches.get(call.dispatched_at, 0) + 1
    assert sorted(batches.values()) == [1, 2, 2]


async def test_mailbox_message_is_rendered_and_incorporated_once_when_appended(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [_call("sleep", seconds=0.3)]},
                    {
                        "expect_seen": [
                            "<mailbox_update>\nFrom someone:\nonly on Safari\n</mailbox_update>"
                        ],
                        "say": "done",
                    },
                ]
            }
        ]
    }
    stack = build_stack(db_url, tmp_path, script)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    for _ in range(3):
        await stack.scheduler.transact(
            stack.scheduler.append_mailbox, task.task_id, "k1", [text_part("only on Safari")]
        )
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded
    keys = await _transcript_keys(stack, task.task_id)
    assert len([k for k in keys if k.startswith("mbx:")]) == 1


async def test_tool_exception_becomes_result_for_model_when_tool_has_a_bug(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [_call("explode")]},
                    {"expect_seen": ["kaboom"], "say": "it broke"},
                ]
            }
        ]
    }
    stack = build_stack(db_url, tmp_path, script)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded
    [call] = await _calls(stack, task.task_id)
    assert call.outcome == "error"


@pytest.mark.parametrize(
    ("call", "told"),
    [
        ({"name": "lookup", "raw_args": '{"key": "a'}, "not valid JSON"),
        ({"name": "lookup", "raw_args": '["a"]'}, "not a JSON object"),
        (_call("lookup", key=7), "key: 7 is not of type 'string'"),
        (_call("create_thing", title=["x"]), "title: ['x'] is not of type 'string'"),
        (_call("delegate", context="why"), "'goal' is a required property"),
    ],
)
async def test_malformed_arguments_come_back_to_model_as_tool_error_when_model_sends_them(
    db_url: str, tmp_path: Path, call: dict[str, Any], told: str
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [call]},
                    {"expect_seen": [told, "It was not run"], "tool_calls": [_call("lookup")]},
                    {"expect_seen": ["value of None"], "say": "fixed my call"},
                ]
            }
        ]
    }
    stack = build_stack(db_url, tmp_path, script)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task

    final = await stack.run_until_terminal(task.task_id)

    assert final.status is TaskStatus.succeeded
    refused, retried = await _calls(stack, task.task_id)
    assert (refused.outcome, refused.dispatched_at) == ("error", None)
    assert retried.outcome == "ok"
    assert not (tmp_path / "effects.log").exists()  # nothing ran for the refused call
    lookups = (tmp_path / "lookups.log").read_text().splitlines()
    assert lookups == ["start call_1_0"]


async def test_a_tasks_lifecycle_is_logged_when_it_starts_and_ends(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = {"scripts": [{"turns": [{"say": "all done here"}]}]}
    stack = build_stack(db_url, tmp_path, script)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    with caplog.at_level(logging.INFO, logger="runtime.executor.runner"):
        await stack.run_until_terminal(task.task_id)
    lines = [r.getMessage() for r in caplog.records if getattr(r, "task_id", None) == task.task_id]
    assert lines == [
        f"task {task.task_id}: started (agent default)",
        f"task {task.task_id}: succeeded: all done here",
    ]


async def test_unexpected_phase_exception_fails_task_with_error_recorded(
    db_url: str, tmp_path: Path
) -> None:
    class Broken:
        async def complete(self, request: Any) -> Any:
            raise ZeroDivisionError("model adapter bug")

    stack = build_stack(db_url, tmp_path, Broken())
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.failed
    assert final.result is not None
    assert final.result["error"]["type"] == "ZeroDivisionError"
    assert final.result["error"]["phase"] == "call_model"


async def test_transition_outside_the_graph_fails_task_when_a_phase_returns_one(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def skips_ahead(run: Any, task: Any, ctx: Any) -> Any:
        return context.goto(run, "done")  # load_context may only go to check_scheduler

    loads = phase_table.TABLE["load_context"]
    monkeypatch.setitem(phase_table.TABLE, "load_context", replace(loads, run=skips_ahead))
    stack = build_stack(db_url, tmp_path, {"scripts": [{"turns": [{"say": "never"}]}]})
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task

    final = await stack.run_until_terminal(task.task_id)

    assert final.status is TaskStatus.failed
    assert final.result is not None
    assert final.result["error"]["phase"] == "load_context"
    assert "may not go to done" in final.result["error"]["message"]


async def test_each_limit_ends_run_with_its_named_outcome(db_url: str, tmp_path: Path) -> None:
    loop_turn = {"tool_calls": [_call("lookup", key="x")]}
    script = {"scripts": [{"turns": [loop_turn] * 10}]}
    cases: dict[str, dict[str, float]] = {
        "limit:max_turns": {"max_turns": 3},
        "limit:max_tool_calls": {"max_tool_calls": 2},
        "limit:max_wall_seconds": {"max_wall_seconds": 0.001},
    }
    for outcome, limits in cases.items():
        stack = build_stack(
            db_url, tmp_path, script, agents={"default": agent(["lookup"], **limits)}
        )
        task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
        final = await stack.run_until_terminal(task.task_id)
        assert final.status is TaskStatus.failed, outcome
        assert final.result is not None and final.result["outcome"] == outcome


async def test_delegation_depth_limit_is_reported_to_model_when_exceeded(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [_call("delegate", goal="g")]},
                    {"expect_seen": ["max_delegation_depth"], "say": "did it myself"},
                ]
            }
        ]
    }
    lead = agent(["delegate"], max_delegation_depth=0)
    stack = build_stack(db_url, tmp_path, script, agents={"lead": lead, "default": agent([])})
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="lead"))).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded


async def test_delegated_child_is_awaited_and_its_result_returned(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {"match": "Goal: check logs", "turns": [{"say": "logs say race"}]},
            {
                "turns": [
                    {"tool_calls": [_call("delegate", goal="check logs")]},
                    {"tool_calls": [_call("wait_for_task", task_id="{child}")]},
                    {"say": "child finished"},
                ]
            },
        ]
    }
    stack = build_stack(db_url, tmp_path, ChildAware(script))
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded
    calls = await _calls(stack, task.task_id)
    assert calls[1].result is not None
    result = json.loads(calls[1].result["output"])
    assert result["status"] == "succeeded" and result["summary"] == "logs say race"


async def test_deadline_then_late_result_keeps_first_result(db_url: str, tmp_path: Path) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [_call("lookup", key="slow", sleep_s=0.6)]},
                    {"expect_seen": ["deadline"], "say": "gave up"},
                ]
            }
        ]
    }
    stack = build_stack(
        db_url, tmp_path, script, agents={"default": agent(["lookup"], tool_deadline_s=0.1)}
    )
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    await stack.run_until_terminal(task.task_id)
    import asyncio

    await asyncio.sleep(0.8)  # let the late report arrive
    [call] = await _calls(stack, task.task_id)
    assert call.outcome == "deadline"
    assert call.late_reports == 1


async def _wait_for(predicate: Any, timeout: float = 10) -> None:
    import asyncio

    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.02)


async def test_stop_during_batch_lets_batch_finish_and_starts_nothing_new(
    db_url: str, tmp_path: Path
) -> None:
    import asyncio

    calls = [_call("lookup", key=str(i), sleep_s=0.5) for i in range(3)]
    script = {"scripts": [{"turns": [{"tool_calls": calls}, {"say": "never"}]}]}
    stack = build_stack(db_url, tmp_path, script, agents={"default": agent(["lookup"], fanout=2)})
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    worker = stack.worker()
    running = asyncio.create_task(worker.run())

    async def batch_started() -> bool:
        return any(c.dispatch_state != "pending" for c in await _calls(stack, task.task_id))

    await _wait_for(batch_started)
    await stack.scheduler.transact(stack.scheduler.request_cancel, task.task_id, "stop", "U1")
    try:
        await _wait_for(lambda: _is_terminal(stack, task.task_id))
    finally:
        worker.stop()
        await running
    final = await stack.scheduler.get(task.task_id)
    assert final is not None and final.status is TaskStatus.canceled
    by_id = {c.call_id: c for c in await _calls(stack, task.task_id)}
    assert by_id["call_0_0"].outcome == "ok" and by_id["call_0_1"].outcome == "ok"
    assert by_id["call_0_2"].outcome == "canceled" and by_id["call_0_2"].dispatched_at is None
    assert len((tmp_path / "lookups.log").read_text().splitlines()) == 2


async def _is_terminal(stack: Stack, task_id: str) -> bool:
    task = await stack.scheduler.get(task_id)
    return task is not None and task.status.is_terminal


async def test_ancestor_cancel_stops_child_at_its_next_checkpoint(
    db_url: str, tmp_path: Path
) -> None:
    import asyncio

    sleepy = {"tool_calls": [_call("sleep", seconds=0.2)]}
    script = {
        "scripts": [
            {"match": "Goal: long", "turns": [sleepy] * 30 + [{"say": "never"}]},
            {
                "turns": [
                    {"tool_calls": [_call("delegate", goal="long")]},
                    {"tool_calls": [_call("wait_for_task", task_id="{child}")]},
                    {"say": "never"},
                ]
            },
        ]
    }
    stack = build_stack(db_url, tmp_path, ChildAware(script))
    root = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    worker = stack.worker()
    running = asyncio.create_task(worker.run())

    async def child_working() -> bool:
        from sqlalchemy import select

        from runtime.store.models import TaskRow

        rows = await stack.db.run(
            lambda s: list(s.scalars(select(TaskRow).where(TaskRow.parent_id == root.task_id)))
        )
        return bool(rows) and rows[0].status == "running"

    await _wait_for(child_working)
    await stack.scheduler.transact(stack.scheduler.request_cancel, root.task_id, "stop", "U1")
    try:
        await _wait_for(lambda: _is_terminal(stack, root.task_id))
        from sqlalchemy import select

        from runtime.store.models import TaskRow

        child_id = await stack.db.run(
            lambda s: s.scalars(
                select(TaskRow.task_id).where(TaskRow.parent_id == root.task_id)
            ).one()
        )
        await _wait_for(lambda: _is_terminal(stack, child_id))
    finally:
        worker.stop()
        await running
    child = await stack.scheduler.get(child_id)
    assert child is not None and child.status is TaskStatus.canceled
    child_calls = await _calls(stack, child_id)
    assert len(child_calls) < 30
