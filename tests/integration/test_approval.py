"""Approval before writes, on a real database: a call to a tool in ``require_approval`` asks
its thread once, parks, and runs exactly once on ``approve``; ``reject <reason>`` reaches
the model as the call's result; an answer to another call, or from before the question, lets
nothing through."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runtime.answers import Approval, approval_of
from runtime.scheduler import Appended, Duplicate
from runtime.store import deliveries, executions, outbox, tool_calls, transcripts
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part
from tests.harness import Stack, agent, build_stack, until


def script(*, expect: tuple[str, ...] = ()) -> dict[str, Any]:
    create = {"name": "create_thing", "args": {"title": "release v2"}}
    return {
        "scripts": [
            {
                "turns": [
                    {"say": "creating", "tool_calls": [{"name": "lookup", "args": {"key": "a"}}]},
                    {"tool_calls": [create]},
                    {"expect_seen": list(expect), "say": "finished"},
                ]
            }
        ]
    }


def approval_stack(db_url: str, folder: Path, **kwargs: Any) -> Stack:
    guarded = agent(["lookup", "create_thing"]).model_copy(
        update={"require_approval": ("create_thing",)}
    )
    return build_stack(db_url, folder, script(**kwargs), agents={"default": guarded})


async def asks(stack: Stack, task_id: str) -> list[outbox.OutboxPost]:
    return await stack.posts(task_id, "approval")


async def parked(stack: Stack, task_id: str) -> bool:
    run = await stack.db.read(lambda s: executions.load_run(s, task_id))
    task = await stack.scheduler.get(task_id)
    waiting = task is not None and task.status is TaskStatus.waiting
    return run is not None and run.phase == "await_approval" and waiting


def effects(stack: Stack) -> list[str]:
    path = stack.folder / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


async def reply(stack: Stack, task_id: str, key: str, text: str) -> object:
    return await stack.scheduler.transact(
        stack.scheduler.append_mailbox, task_id, key, [text_part(text)]
    )


async def test_write_waits_for_approve_and_runs_once_when_approved_twice(
    db_url: str, tmp_path: Path
) -> None:
    stack = approval_stack(db_url, tmp_path, expect=("looks risky", "approve"))
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    async with stack.working():
        await until(lambda: parked(stack, task.task_id))
        # A stale wake-up parks again without asking again; a remark is no answer.
        now = stack.ctx.clock.now()
        await stack.db.run(lambda s: deliveries.add_delivery(s, task.task_id, "tick", now, now))
        await reply(stack, task.task_id, "slack:remark", "looks risky?")
        await asyncio.sleep(0.5)
        await until(lambda: parked(stack, task.task_id))
        assert effects(stack) == []
        [ask] = await asks(stack, task.task_id)
        assert "`create_thing`" in ask.body and "release v2" in ask.body
        assert [a.name for a in ask.actions] == ["approve", "reject"]
        assert ask.key == "approval:call_1_0"

        first = await reply(stack, task.task_id, "slack:ok", "<@U0KEEL> approve")
        again = await reply(stack, task.task_id, "slack:ok", "<@U0KEEL> approve")
        assert isinstance(first, Appended) and isinstance(again, Duplicate)
        await reply(stack, task.task_id, "slack:ok-2", "approve")  # a second person, later
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.succeeded
    assert len(effects(stack)) == 1
    keys = [
        e.item_key for e in await stack.db.read(lambda s: transcripts.transcript(s, task.task_id))
    ]
    # The replies read while parked reach the model after the call's result, once.
    remark = next(k for k in keys if k.startswith("mbx:"))
    assert keys.index("result:call_1_0") < keys.index(remark) < keys.index("model:2:0")
    assert len([k for k in keys if k.startswith("mbx:")]) == 3
    [answered] = await asks(stack, task.task_id)
    assert answered.actions == () and "✅ Approved by" in answered.body


async def test_reject_reason_reaches_the_model_as_the_result_when_a_person_rejects(
    db_url: str, tmp_path: Path
) -> None:
    stack = approval_stack(db_url, tmp_path, expect=("not on a Friday",))
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    async with stack.working():
        await until(lambda: parked(stack, task.task_id))
        await reply(stack, task.task_id, "slack:no", "reject: not on a Friday")
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.succeeded
    assert effects(stack) == []
    [call] = [
        c
        for c in await stack.db.read(lambda s: tool_calls.all_calls(s, task.task_id))
        if c.name == "create_thing"
    ]
    assert call.outcome == "rejected" and call.dispatched_at is None
    assert call.result is not None and "not on a Friday" in call.result["output"]
    [answered] = await asks(stack, task.task_id)
    assert answered.actions == () and "❌ Rejected by" in answered.body


async def test_nothing_runs_when_the_answer_names_another_call_or_came_before_the_question(
    db_url: str, tmp_path: Path
) -> None:
    stack = approval_stack(db_url, tmp_path)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    # An approval written before the question was asked approves nothing.
    await reply(stack, task.task_id, "slack:early", "approve")
    async with stack.working():
        await until(lambda: parked(stack, task.task_id))
        await reply(stack, task.task_id, "slack:click-old", "approve call=call_0_0")
        await asyncio.sleep(0.5)
        await until(lambda: parked(stack, task.task_id))
        assert effects(stack) == []
        await reply(stack, task.task_id, "slack:click", "approve call=call_1_0")
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.succeeded and len(effects(stack)) == 1


async def test_stop_while_waiting_for_approval_ends_the_task_without_the_write(
    db_url: str, tmp_path: Path
) -> None:
    stack = approval_stack(db_url, tmp_path)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    async with stack.working():
        await until(lambda: parked(stack, task.task_id))
        assert await stack.scheduler.transact(
            stack.scheduler.request_cancel, task.task_id, "stopped on request", "U1"
        )
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.canceled and effects(stack) == []


def test_answer_is_approve_or_reject_with_its_reason_when_replies_are_read() -> None:
    assert approval_of("<@U0KEEL> Approve.", "c1") == Approval("approve")
    assert approval_of(":white_check_mark:", "c1") == Approval("approve")
    assert approval_of("approve call=c1", "c1") == Approval("approve")
    assert approval_of("approve call=c0", "c1") is None
    assert approval_of("reject: the base is wrong", "c1") == Approval("reject", "the base is wrong")
    assert approval_of("reject call=c1", "c1") == Approval("reject", "")
    assert approval_of("I approve of nothing", "c1") is None
    assert approval_of("", "c1") is None


async def test_a_task_without_a_thread_is_refused_the_write_instead_of_waiting_forever(
    db_url: str, tmp_path: Path
) -> None:
    stack = approval_stack(db_url, tmp_path, expect=("only the task that owns the conversation",))
    task = (
        await stack.scheduler.transact(stack.scheduler.schedule, make_spec(origin_thread_ref=None))
    ).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded and effects(stack) == []
    assert await asks(stack, task.task_id) == []
