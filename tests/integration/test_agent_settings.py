"""Every agent setting is read from the task's own agent: each is set on an agent that is not
named ``default`` (beside a ``default`` that differs) and must hold for that agent's task.
A task whose agent is not configured fails rather than run with settings nobody wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.config import AgentConfig
from runtime.store import executions, tool_calls
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part
from tests.harness import Stack, agent, build_stack, until
from tests.ports import RecordingModel


def turns(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"scripts": [{"turns": list(steps)}]}


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def coder_stack(db_url: str, folder: Path, script: Any, coder: AgentConfig) -> Stack:
    # ``default`` may do everything the harness offers; only ``coder`` is narrowed.
    everything = agent(["lookup", "create_thing", "delegate", "wait_for_task"])
    return build_stack(db_url, folder, script, agents={"default": everything, "coder": coder})


async def run_coder(stack: Stack) -> Any:
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="coder"))).task
    return await stack.run_until_terminal(task.task_id)


def effects(stack: Stack) -> list[str]:
    path = stack.folder / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


async def test_tools_are_the_agents_own_when_it_is_not_default(db_url: str, tmp_path: Path) -> None:
    provider = RecordingModel(turns(call("create_thing", title="x"), {"say": "done"}))
    stack = coder_stack(db_url, tmp_path, provider, agent(["lookup"]))
    final = await run_coder(stack)
    assert final.status is TaskStatus.succeeded
    assert [spec.name for spec in provider.requests[0].tools] == ["lookup"]
    [refused] = await stack.db.read(lambda s: tool_calls.all_calls(s, final.task_id))
    assert refused.result is not None and "unknown tool" in refused.result["output"]
    assert effects(stack) == []


async def test_instructions_are_the_agents_own_when_it_is_not_default(
    db_url: str, tmp_path: Path
) -> None:
    provider = RecordingModel(turns({"say": "done"}))
    coder = agent(["lookup"]).model_copy(update={"instructions": "You are coder-7."})
    final = await run_coder(coder_stack(db_url, tmp_path, provider, coder))
    assert final.status is TaskStatus.succeeded
    assert "You are coder-7." in provider.requests[0].system
    assert "You are Keel" not in provider.requests[0].system


async def test_limits_are_the_agents_own_when_it_is_not_default(
    db_url: str, tmp_path: Path
) -> None:
    script = turns(*[call("lookup", key="x")] * 5, {"say": "done"})
    final = await run_coder(coder_stack(db_url, tmp_path, script, agent(["lookup"], max_turns=2)))
    assert final.status is TaskStatus.failed
    assert final.result is not None and final.result["outcome"] == "limit:max_turns"


async def test_approval_is_the_agents_own_when_it_is_not_default(
    db_url: str, tmp_path: Path
) -> None:
    script = turns(call("create_thing", title="release"), {"say": "done"})
    coder = agent(["create_thing"]).model_copy(update={"require_approval": ("create_thing",)})
    stack = coder_stack(db_url, tmp_path, script, coder)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="coder"))).task

    async def parked() -> bool:
        run = await stack.db.read(lambda s: executions.load_run(s, task.task_id))
        return run is not None and run.phase == "await_approval"

    async with stack.working():
        await until(parked)
        assert effects(stack) == []
        assert len(await stack.posts(task.task_id, "approval")) == 1


async def test_mailbox_template_is_the_agents_own_when_it_is_not_default(
    db_url: str, tmp_path: Path
) -> None:
    script = turns(
        {"wait_seen": ["CODER-MAIL"], "say": "read it"},
    )
    coder = agent(["lookup"]).model_copy(update={"mailbox_template": "CODER-MAIL {text}"})
    stack = coder_stack(db_url, tmp_path, script, coder)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="coder"))).task
    await stack.scheduler.transact(
        stack.scheduler.append_mailbox, task.task_id, "slack:more", [text_part("also Safari")]
    )
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded


async def test_delegation_depth_is_the_agents_own_when_it_is_not_default(
    db_url: str, tmp_path: Path
) -> None:
    refused = {"expect_seen": ["max_delegation_depth (0)"], "say": "myself"}
    script = turns(call("delegate", goal="g"), refused)
    coder = agent(["delegate"], max_delegation_depth=0)
    final = await run_coder(coder_stack(db_url, tmp_path, script, coder))
    assert final.status is TaskStatus.succeeded


async def test_task_fails_when_its_agent_is_not_configured(db_url: str, tmp_path: Path) -> None:
    stack = coder_stack(db_url, tmp_path, turns({"say": "done"}), agent(["lookup"]))
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="ghost"))).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.failed
    assert final.result is not None
    assert "agent 'ghost' is not configured" in final.result["error"]["message"]
