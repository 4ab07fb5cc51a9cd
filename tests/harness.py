"""An executor stack for tests: real database, scheduler, runner and worker; scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.clock import Clock, SystemClock
from runtime.config import AgentConfig, AgentLimits
from runtime.executor.context import ExecutorContext
from runtime.executor.runner import Runner
from runtime.models.base import ModelProvider
from runtime.models.scripted import ScriptedProvider
from runtime.scheduler import Scheduler
from runtime.store import executions, outbox
from runtime.store.engine import Database
from runtime.store.records import Task
from runtime.tools.base import Tool
from runtime.tools.builtin import Delegate, PostUpdate, WaitForTask
from runtime.worker import Worker
from tests import tools as test_tools
from tests.factories import make_spec


@dataclass
class Stack:
    db: Database
    scheduler: Scheduler
    ctx: ExecutorContext
    runner: Runner
    folder: Path

    def worker(self, concurrency: int = 2) -> Worker:
        return Worker(self.scheduler, self.runner, concurrency=concurrency, poll_interval_s=0.05)

    @asynccontextmanager
    async def working(self, concurrency: int = 2) -> AsyncIterator[None]:
        """A worker runs the stack's tasks while the block runs, and has stopped after it."""
        worker = self.worker(concurrency)
        running = asyncio.create_task(worker.run())
        try:
            yield
        finally:
            worker.stop()
            await running

    async def work_until(self, stop: Path, concurrency: int) -> None:
        """A worker process's life: work until the file ``stop`` exists, then close."""
        async with self.working(concurrency):
            while not stop.exists():
                await asyncio.sleep(0.05)
        self.db.close()

    async def run_until_terminal(self, task_id: str, timeout: float = 30) -> Task:
        async with self.working(), asyncio.timeout(timeout):
            while True:
                task = await self.scheduler.get(task_id)
                if task is not None and task.status.is_terminal and await self._done(task_id):
                    return task
                await asyncio.sleep(0.05)

    async def ended(self, task_id: str) -> Task:
        """The task once its run has reached ``done``, whatever the task's status says."""

        async def done() -> bool:  # a read: polling must not queue for SQLite's write lock
            run = await self.db.read(lambda s: executions.load_run(s, task_id))
            return run is not None and run.phase == "done"

        await until(done)
        task = await self.scheduler.get(task_id)
        assert task is not None
        return task

    async def posts(self, task_id: str, purpose: str) -> list[outbox.OutboxPost]:
        found = await self.db.read(lambda s: outbox.posts_of_task(s, task_id))
        return [p for p in found if p.purpose == purpose]

    async def _done(self, task_id: str) -> bool:
        run = await self.db.run(lambda s: executions.load_run(s, task_id))
        return run is not None and run.phase == "done"


async def schedule_task(db: Database, **overrides: Any) -> Task:
    """A task scheduled from ``make_spec(**overrides)`` (system clock, default lease)."""
    scheduler = Scheduler(db)
    return (await scheduler.transact(scheduler.schedule, make_spec(**overrides))).task


async def until(predicate: Callable[[], Awaitable[object]], timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.05)


def default_tools(
    folder: Path,
    scheduler: Scheduler,
    db: Database,
    agents: Mapping[str, AgentConfig] | None = None,
) -> dict[str, Tool]:
    """``agents``: what ``delegate`` reads at each call (filled in by the caller later)."""
    found: list[Tool] = [
        test_tools.Lookup(folder / "lookups.log"),
        test_tools.CreateThing(folder / "effects.log"),
        test_tools.CreateThing(folder / "blind.log", name="create_blind", reconciles=False),
        test_tools.OpenPull(folder / "pulls.log"),
        test_tools.Sleep(folder),
        test_tools.Explode(),
        test_tools.Blob(),
        Delegate(scheduler, agents if agents is not None else {}),
        WaitForTask(scheduler),
        PostUpdate(db, scheduler),
    ]
    return {t.name: t for t in found}


def agent(tool_names: Sequence[str], **limits: Any) -> AgentConfig:
    return AgentConfig(tools=tuple(tool_names), limits=AgentLimits(**limits))


def build_stack(
    db_url: str,
    folder: Path,
    script: Mapping[str, Any] | ModelProvider,
    *,
    agents: Mapping[str, AgentConfig] | None = None,
    lease_seconds: float = 5.0,
    clock: Clock | None = None,
) -> Stack:
    db = Database.from_url(db_url)
    clock = clock or SystemClock()
    scheduler = Scheduler(db, lease_seconds=lease_seconds, clock=clock)
    provider = script if not isinstance(script, Mapping) else ScriptedProvider.from_dict(script)
    known: dict[str, AgentConfig] = {}
    tools = default_tools(folder, scheduler, db, known)
    known.update(agents or {"default": agent(list(tools))})
    ctx = ExecutorContext(
        db=db,
        scheduler=scheduler,
        provider=provider,
        tools=tools,
        agents=known,
        clock=clock,
        poll_interval_s=0.05,
    )
    return Stack(db, scheduler, ctx, Runner(ctx), folder)


class ChildAware:
    """Scripted provider that fills the child's id into wait_for_task from the transcript."""

    def __init__(self, script: dict[str, Any]) -> None:
        from runtime.models.scripted import ScriptedProvider

        self.inner = ScriptedProvider.from_dict(script)

    async def complete(self, request: Any) -> Any:
        from runtime.models.base import ModelResponse, ToolCallItem, ToolResultItem

        response = await self.inner.complete(request)
        child = next(
            (
                json.loads(i.output)["task_id"]
                for i in request.items
                if isinstance(i, ToolResultItem) and "task_id" in i.output
            ),
            "",
        )
        items = tuple(
            ToolCallItem(
                i.call_id,
                i.name,
                {k: (child if v == "{child}" else v) for k, v in i.arguments.items()},
            )
            if isinstance(i, ToolCallItem)
            else i
            for i in response.items
        )
        return ModelResponse(items, response.usage)
