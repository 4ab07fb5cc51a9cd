"""Built-in tools: delegation to a child Task, waiting for it, and progress updates.

``delegate`` keys the child by (parent task, call id), so a recovered call finds the child it
already made instead of making a second one. A child runs as its parent's agent, or as one
the parent names that may do nothing the parent may not (``authority_beyond``); its tree
holds at most the root agent's ``limits.max_tree_tasks`` tasks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from runtime.config import AgentConfig, authority_beyond
from runtime.scheduler import Scheduled, Scheduler, TreeFull
from runtime.store import outbox
from runtime.store.engine import Database
from runtime.store.records import TaskSpec
from runtime.tools.base import Completed, Effect, Pending, Started, ToolContext, Unknown


class Delegate:
    name = "delegate"
    description = (
        "Hand a focused sub-objective to a child task. Returns the child's task id. The child "
        "runs as your agent, or as the one you name if it may do nothing you may not."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "context": {"type": "string"},
            "returns": {"type": "string"},
            "workspace": {"type": "string", "enum": ["shared", "own"]},
            "agent": {"type": "string"},
        },
        "required": ["goal"],
    }
    effect: Effect = "write"

    def __init__(self, scheduler: Scheduler, agents: Mapping[str, AgentConfig]) -> None:
        self.scheduler = scheduler
        # Read at each call: the composition root may fill it after building the tools.
        self.agents = agents

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        parent = await self.scheduler.get(ctx.task_id)
        root = await self.scheduler.get(ctx.root_task_id)
        if parent is None or root is None:
            return Completed("this task is not on record", is_error=True)
        parent_agent = self.agents.get(parent.agent)
        root_agent = self.agents.get(root.agent)
        if parent_agent is None or root_agent is None:
            return Completed(f"agent {parent.agent!r} is not configured", is_error=True)
        max_depth = parent_agent.limits.max_delegation_depth
        if ctx.depth + 1 > max_depth:
            message = f"limit max_delegation_depth ({max_depth}) reached: do this yourself"
            return Completed(message, is_error=True)
        agent = str(args.get("agent") or parent.agent)
        refused = self._refusal(parent.agent, parent_agent, agent)
        if refused is not None:
            return Completed(refused, is_error=True)
        spec = TaskSpec(
            agent=agent,
            message=_contract(args),
            parent_id=ctx.task_id,  # type: ignore[arg-type]
            child_key=ctx.call_id,
            repo=parent.repo,
            objective_key=f"child:{ctx.task_id}:{ctx.call_id}",
        )
        cap = root_agent.limits.max_tree_tasks
        match await self.scheduler.transact(
            self.scheduler.schedule_child, spec, max_tree_tasks=cap
        ):
            case Scheduled(task=child):
                return Completed(json.dumps({"task_id": child.task_id, "agent": agent}))
            case TreeFull(size=size):
                return Completed(
                    f"limit max_tree_tasks ({cap}) reached: this request's tasks number {size} "
                    "already, so no more can be delegated: do this yourself",
                    is_error=True,
                )

    def _refusal(self, parent_name: str, parent: AgentConfig, name: str) -> str | None:
        """Why the child may not run as ``name``; None if it may."""
        if name == parent_name:
            return None
        child = self.agents.get(name)
        if child is None:
            return f"no agent {name!r} is configured"
        beyond = authority_beyond(parent, child)
        if beyond:
            return f"agent {name!r} may do what {parent_name!r} may not: {', '.join(beyond)}"
        return None

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        # Scheduling is keyed by (parent, call id): repeating it returns the same child.
        outcome = await self.start(args, ctx)
        return outcome if isinstance(outcome, Completed) else Unknown("no child")


def _contract(args: dict[str, Any]) -> str:
    return "\n\n".join(
        f"{label}: {args[key]}"
        for key, label in (("goal", "Goal"), ("context", "Context"), ("returns", "Return"))
        if args.get(key)
    )


class WaitForTask:
    name = "wait_for_task"
    description = "Wait until a child task finishes and return its result."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"task_id": {"type": "string"}},
        "required": ["task_id"],
    }
    effect: Effect = "wait"

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        task_id = str(args.get("task_id", ""))
        child = await self.scheduler.get(task_id)
        if child is None or child.parent_id != ctx.task_id:
            return Completed(f"no child task {task_id!r} of this task", is_error=True)
        return Started(handle=task_id)

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        child = await self.scheduler.get(handle)
        if child is None:
            return Completed(f"child task {handle} is missing", is_error=True)
        if not child.status.is_terminal:
            return Pending(child.status.value)
        result = child.result or {}
        body = {"task_id": handle, "status": child.status.value, "summary": result.get("summary")}
        return Completed(json.dumps(body), is_error=child.status.value != "succeeded")

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("waits are resumed, not reconciled")


class PostUpdate:
    name = "post_update"
    description = "Post a short progress note to the task's thread."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    effect: Effect = "write"

    def __init__(self, db: Database, scheduler: Scheduler) -> None:
        self.db = db
        self.scheduler = scheduler

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        task = await self.scheduler.get(ctx.task_id)
        if task is None or task.origin_thread_ref is None:
            return Completed("this task has no thread to post to", is_error=True)
        thread = task.origin_thread_ref
        now = self.scheduler.clock.now()
        key = f"{ctx.task_id}:update:{ctx.call_id}"
        await self.db.run(
            lambda s: outbox.enqueue_post(
                s,
                task_id=ctx.task_id,
                purpose="update",
                thread=thread,
                key=key,
                action="post",
                body=str(args.get("text", "")),
                now=now,
            )
        )
        return Completed("update queued for the thread")

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        # The outbox key makes queueing idempotent, so queueing again is safe.
        outcome = await self.start(args, ctx)
        return outcome if isinstance(outcome, Completed) else Unknown("not queued")
