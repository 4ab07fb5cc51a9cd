"""Built-in tools: delegation to a child Task, waiting for it, and progress updates.

``delegate`` keys the child by (parent task, call id), so a recovered call finds the child it
already made instead of making a second one.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from runtime.scheduler import Scheduler
from runtime.store import outbox
from runtime.store.engine import Database
from runtime.store.records import TaskSpec
from runtime.tools.base import Completed, Effect, Pending, Started, ToolContext, Unknown


class Delegate:
    name = "delegate"
    description = "Hand a focused sub-objective to a child task. Returns the child's task id."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "context": {"type": "string"},
            "returns": {"type": "string"},
            "workspace": {"type": "string", "enum": ["shared", "own"]},
        },
        "required": ["goal"],
    }
    effect: Effect = "write"

    def __init__(self, scheduler: Scheduler, *, max_depth: int = 2, agent: str = "default") -> None:
        self.scheduler = scheduler
        self.max_depth = max_depth
        self.agent = agent

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        if ctx.depth + 1 > self.max_depth:
            message = f"limit max_delegation_depth ({self.max_depth}) reached: do this yourself"
            return Completed(message, is_error=True)
        parent = await self.scheduler.get(ctx.task_id)
        contract = "\n\n".join(
            f"{label}: {args[key]}"
            for key, label in (("goal", "Goal"), ("context", "Context"), ("returns", "Return"))
            if args.get(key)
        )
        spec = TaskSpec(
            agent=self.agent,
            message=contract,
            parent_id=ctx.task_id,  # type: ignore[arg-type]
            child_key=ctx.call_id,
            repo=parent.repo if parent else None,
            objective_key=f"child:{ctx.task_id}:{ctx.call_id}",
        )
        scheduled = await self.scheduler.schedule(spec)
        return Completed(json.dumps({"task_id": scheduled.task.task_id}))

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        # Scheduling is keyed by (parent, call id): repeating it returns the same child.
        outcome = await self.start(args, ctx)
        return outcome if isinstance(outcome, Completed) else Unknown("no child")


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
