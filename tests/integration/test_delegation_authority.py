"""Delegation cannot widen authority: a child runs as its parent's agent, or as one it names
that may do nothing the parent may not; a daemon role's ``deny`` binds its whole tree; a tree
stops growing at ``limits.max_tree_tasks`` and the model is told why; a tree that has spent
its root agent's tree budget ends at it, every task of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from routing.daemons import DaemonDefinition, Watch
from runtime.clock import SystemClock
from runtime.config import AgentConfig, ModelPrice
from runtime.executor.accounting import Accounting
from runtime.reporting import ThreadReporter
from runtime.store import tasks as q
from runtime.store import tool_calls, usage
from runtime.store.records import Task, TaskStatus
from tests import tools as test_tools
from tests.factories import make_spec
from tests.harness import ChildAware, Stack, agent, build_stack

PRICE = ModelPrice(input_per_million=1_000.0, output_per_million=1_000.0)  # ~$0.2 a call
ALL = ["lookup", "create_thing", "git_push", "delegate", "wait_for_task"]
TRIAGE = DaemonDefinition(
    daemon_id="triage", purpose="sort issues", watch=(Watch(provider="github"),), deny=("git_push",)
)


def delegate(goal: str, **args: Any) -> dict[str, Any]:
    return {"name": "delegate", "args": {"goal": goal, **args}}


def stack_with(db_url: str, folder: Path, script: dict[str, Any], **agents: AgentConfig) -> Stack:
    stack = build_stack(db_url, folder, script, agents=agents)
    # A push whose effect is a line in pushes.log, under the real tool's name.
    pushes = test_tools.CreateThing(folder / "pushes.log", name="git_push")
    stack.ctx.tools = {**stack.ctx.tools, "git_push": pushes}
    return stack


def pushes(stack: Stack) -> list[str]:
    path = stack.folder / "pushes.log"
    return path.read_text().splitlines() if path.exists() else []


async def tree(stack: Stack, root: Task) -> list[Task]:
    """The children the root's delegate calls made, from the calls' results; checked
    against the store's count of the tree."""
    children = []
    for call in await stack.db.read(lambda s: tool_calls.all_calls(s, root.task_id)):
        output = (call.result or {}).get("output", "")
        if call.name == "delegate" and output.startswith("{"):
            child = await stack.scheduler.get(json.loads(output)["task_id"])
            assert child is not None
            children.append(child)
    size = await stack.db.read(lambda s: q.tree_size(s, root.task_id))
    assert size == 1 + len(children)
    return children


async def outputs(stack: Stack, task_id: str) -> list[str]:
    calls = await stack.db.read(lambda s: tool_calls.all_calls(s, task_id))
    return [str((c.result or {}).get("output", "")) for c in calls]


async def test_daemon_deny_binds_its_child_when_it_delegates_a_push(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {
                "match": "Goal: push the fix",
                "turns": [
                    {"tool_calls": [{"name": "git_push", "args": {"title": "main"}}]},
                    {"say": "could not push"},
                ],
            },
            {
                "turns": [
                    {"tool_calls": [delegate("push the fix")]},
                    {"tool_calls": [delegate("push the fix", agent="fixer")]},
                    {"say": "done"},
                ]
            },
        ]
    }
    fixer = agent(ALL)
    stack = stack_with(
        db_url, tmp_path, script, fixer=fixer, **{"daemon:triage": TRIAGE.agent_config(fixer)}
    )
    root = (
        await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="daemon:triage"))
    ).task
    async with stack.working():
        final = await stack.run_until_terminal(root.task_id)
        [child] = await tree(stack, root)
        child = await stack.ended(child.task_id)
    assert final.status is TaskStatus.succeeded
    # The child runs as the role, so it has no git_push: its call is refused, nothing pushed.
    assert child.agent == "daemon:triage"
    assert any("unknown tool 'git_push'" in out for out in await outputs(stack, child.task_id))
    assert pushes(stack) == []
    # Naming the role's base agent, which may push, is refused with the reason.
    refusal = (await outputs(stack, root.task_id))[1]
    assert "agent 'fixer' may do what 'daemon:triage' may not: tool git_push" in refusal


async def test_child_runs_as_a_named_narrower_agent_when_the_parent_names_it(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {"match": "Goal: look", "turns": [{"say": "looked"}]},
            {"turns": [{"tool_calls": [delegate("look", agent="reader")]}, {"say": "done"}]},
        ]
    }
    stack = stack_with(db_url, tmp_path, script, lead=agent(ALL), reader=agent(["lookup"]))
    root = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="lead"))).task
    async with stack.working():
        await stack.run_until_terminal(root.task_id)
        [child] = await tree(stack, root)
    assert child.agent == "reader"


async def test_named_agent_refused_when_it_skips_an_approval_the_parent_needs(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [delegate("push", agent="pusher")]},
                    {"expect_seen": ["git_push without approval"], "say": "done"},
                ]
            }
        ]
    }
    careful = agent(ALL).model_copy(update={"require_approval": ("git_push",)})
    stack = stack_with(db_url, tmp_path, script, careful=careful, pusher=agent(["git_push"]))
    root = (
        await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="careful"))
    ).task
    final = await stack.run_until_terminal(root.task_id)
    assert final.status is TaskStatus.succeeded
    assert await tree(stack, root) == []


async def test_tree_stops_at_max_tree_tasks_with_the_reason_when_delegating_in_parallel(
    db_url: str, tmp_path: Path
) -> None:
    calls = [delegate(f"part {n}") for n in range(4)]
    script = {
        "scripts": [
            {"match": "Goal: part", "turns": [{"say": "part done"}]},
            {
                "turns": [
                    {"tool_calls": calls},
                    {"expect_seen": ["limit max_tree_tasks (3) reached"], "say": "done"},
                ]
            },
        ]
    }
    lead = agent(ALL, max_tree_tasks=3, fanout=4)
    stack = stack_with(db_url, tmp_path, script, lead=lead)
    root = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="lead"))).task
    async with stack.working():
        final = await stack.run_until_terminal(root.task_id)
    assert final.status is TaskStatus.succeeded
    assert len(await tree(stack, root)) == 2  # the root and two children: three tasks
    refused = [out for out in await outputs(stack, root.task_id) if "max_tree_tasks" in out]
    assert len(refused) == 2


async def test_tree_ends_at_its_cost_budget_when_a_child_spends_it(
    db_url: str, tmp_path: Path
) -> None:
    looping = [{"tool_calls": [{"name": "lookup", "args": {"key": f"k{n}"}}]} for n in range(40)]
    script = {
        "scripts": [
            {"match": "Goal: dig", "turns": [*looping, {"say": "dug"}]},
            {
                "turns": [
                    {"tool_calls": [delegate("dig")]},
                    {"tool_calls": [{"name": "wait_for_task", "args": {"task_id": "{child}"}}]},
                    {"say": "done"},
                ]
            },
        ]
    }
    # About $0.2 a call: the tree may make about five calls in all, the child's included.
    lead = agent(ALL, max_tree_cost_usd=1.0, max_turns=100)
    stack = build_stack(db_url, tmp_path, ChildAware(script), agents={"lead": lead})
    stack.ctx.accounting = Accounting("scripted", {"scripted": PRICE})
    stack.ctx.reporter = ThreadReporter(SystemClock())
    root = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec(agent="lead"))).task
    async with stack.working():
        final = await stack.run_until_terminal(root.task_id)
        [child] = await tree(stack, root)
        child = await stack.ended(child.task_id)
    assert child.result is not None and child.result["outcome"] == "limit:max_tree_cost_usd"
    assert final.result is not None and final.result["outcome"] == "limit:max_tree_cost_usd"
    spent = await stack.db.read(lambda s: usage.tree_totals(s, root.task_id))
    assert 1.0 <= spent.cost_usd < 1.0 + 2 * 0.3
    # The reply says why it stopped and what the whole tree spent.
    [reply] = await stack.posts(root.task_id, "completion")
    assert "max_tree_cost_usd" in reply.body
    assert f"${spent.cost_usd:.2f}" in reply.body and "· 2 tasks" in reply.body
