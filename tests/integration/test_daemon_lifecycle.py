"""A daemon's one long-lived task, end to end on a real database: routing, worker, executor.

Events are real check_run webhook payloads (the payload corpus) through the GitHub adapter's
translation and the router; the task runs on a real worker with the scripted model behind a
recording fake at the model port, and test tools at the tool port. A restart is a fresh
database handle, scheduler, router and worker on the same database.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from adapters.assembly import Keel as App
from adapters.config import ServerConfig, build_config
from adapters.emulators.server import serve
from adapters.web.auth import AdminAuth
from adapters.web.ui import build_ui
from routing.config import DaemonsConfig, RoutingConfig
from routing.daemons import daemon_agents, daemon_residency
from routing.intake import IngestResult, Router
from routing.policy import RoutingPolicy
from runtime.clock import SystemClock
from runtime.config import AgentConfig
from runtime.executor.context import ExecutorContext
from runtime.executor.runner import Runner
from runtime.models.base import ModelRequest, ToolResultItem, UserText
from runtime.scheduler import Scheduler
from runtime.store import executions, tool_calls, transcripts
from runtime.store.engine import Database
from runtime.store.records import Task, TaskStatus
from runtime.worker import Worker
from tests import tools as test_tools
from tests.harness import agent, default_tools
from tests.integration.test_daemon_routing import US, check_run, to_signal
from tests.ports import RecordingModel

PURPOSE = "Diagnose failed CI runs and propose a fix."
LINT = "Octocoders-linter: failure"
UNIT = "unit-tests: failure"
INTEGRATION = "integration: failure"


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


# Turns run on across the events of one task; a successor task starts again at turn 0.
SCRIPT: dict[str, Any] = {
    "scripts": [
        {"match": "integration", "turns": [{"say": "integration broke; diagnosed"}]},
        {
            "turns": [
                {"say": "reading the log", "tool_calls": [_call("lookup", key="lint log")]},
                {"expect_seen": ["value of lint log"], "say": "lint failed: unused import"},
                # The second event; the role may not push, so this call is forged.
                {"expect_seen": [UNIT], "tool_calls": [_call("git_push", title="main")]},
                {"expect_seen": ["unknown tool 'git_push'"], "say": "unit tests failed"},
            ]
        },
    ]
}


def role(**overrides: Any) -> DaemonsConfig:
    ci_doctor: dict[str, Any] = {
        "id": "ci-doctor",
        "agent": "fixer",
        "purpose": PURPOSE,
        "watch": [{"provider": "github", "kind": "check_run", "conclusion": "failure"}],
        "deny": ["git_push"],
    }
    ci_doctor.update(overrides.pop("role", {}))
    return DaemonsConfig.model_validate({"roles": [ci_doctor], **overrides})


@dataclass
class Keel:
    """One process: database handle, scheduler, router and a running worker."""

    url: str
    folder: Path
    daemons: DaemonsConfig
    provider: RecordingModel
    db: Database = field(init=False)
    router: Router = field(init=False)
    _worker: Worker = field(init=False)
    _running: asyncio.Task[None] = field(init=False)

    def start(self) -> None:
        self.db = Database.from_url(self.url)
        scheduler = Scheduler(self.db, lease_seconds=5)
        policy = RoutingPolicy.from_config(
            RoutingConfig(), self.daemons, github_bot_login=US.bot_login, github_app_id=US.app_id
        )
        self.router = Router(scheduler, self.db, policy, retry_delays=(0,))
        known: dict[str, AgentConfig] = {}
        tools = default_tools(self.folder, scheduler, self.db, known)
        tools["git_push"] = test_tools.CreateThing(self.folder / "pushes.log", name="git_push")
        agents = {"fixer": agent(list(tools), max_turns=10)}
        known.update({**agents, **daemon_agents(policy.daemons, agents, tools)})
        ctx = ExecutorContext(
            db=self.db,
            scheduler=scheduler,
            provider=self.provider,
            tools=tools,
            agents=known,
            resident=daemon_residency(policy.daemons, self.daemons.idle_lifetime_s),
            clock=SystemClock(),
            poll_interval_s=0.05,
        )
        self._worker = Worker(scheduler, Runner(ctx), concurrency=2, poll_interval_s=0.05)
        self._running = asyncio.create_task(self._worker.run())

    async def stop(self) -> None:
        self._worker.stop()
        await self._running
        self.db.close()

    @property
    def scheduler(self) -> Scheduler:
        return self.router.scheduler

    async def event(self, name: str, check_run_id: int, delivery_id: str) -> IngestResult:
        payload = check_run(check_run={"id": check_run_id, "name": name})
        signal = to_signal(payload, delivery_id)
        return await self.router.ingest(
            signal, provider="github", delivery_id=delivery_id, raw_kind="check_run"
        )

    async def first_parked(self) -> str:
        """The role's task after its first event, parked for the next one."""
        first = await self.event("Octocoders-linter", 1001, "d-lint")
        assert first.task_id is not None
        await self.parked(first.task_id, events=1)
        return first.task_id

    async def parked(self, task_id: str, events: int, timeout: float = 20) -> Task:
        """The task once it waits again, having read ``events`` events in all."""
        return await self.until(task_id, lambda t, run: _parked(t, run, events), timeout)

    async def finished(self, task_id: str, timeout: float = 20) -> Task:
        return await self.until(
            task_id, lambda t, run: t.status.is_terminal and run.phase == "done", timeout
        )

    async def until(
        self, task_id: str, ready: Callable[[Task, executions.Run], bool], timeout: float
    ) -> Task:
        async with asyncio.timeout(timeout):
            while True:
                task = await self.scheduler.get(task_id)
                run = await self.db.read(lambda s: executions.load_run(s, task_id))
                if task is not None and run is not None and ready(task, run):
                    return task
                await asyncio.sleep(0.05)


def _parked(task: Task, run: executions.Run, events: int) -> bool:
    return (
        task.status is TaskStatus.waiting
        and run.phase == "await_input"
        and run.mailbox_position + 1 == events
    )


@asynccontextmanager
async def keel(
    db_url: str, folder: Path, daemons: DaemonsConfig, script: Mapping[str, Any] = SCRIPT
) -> AsyncIterator[Keel]:
    running = Keel(db_url, folder, daemons, RecordingModel(script))
    running.start()
    try:
        yield running
    finally:
        await running.stop()


async def _item_keys(k: Keel, task_id: str) -> list[str]:
    entries = await k.db.read(lambda s: transcripts.transcript(s, task_id))
    return [e.item_key for e in entries]


# -- one long-lived task ---------------------------------------------------------------------


async def test_daemon_keeps_one_task_waiting_between_events_when_failures_repeat(
    db_url: str, tmp_path: Path
) -> None:
    async with keel(db_url, tmp_path, role()) as k:
        first = await k.event("Octocoders-linter", 1001, "d-lint")
        assert first.task_id is not None
        parked = await k.parked(first.task_id, events=1)
        assert parked.result is None and parked.finished_at is None  # not ended: parked
        assert parked.agent == "daemon:ci-doctor"

        second = await k.event("unit-tests", 1002, "d-unit")
        again = await k.event("unit-tests", 1002, "d-unit")  # GitHub redelivers it
        assert (second.decision, second.task_id) == ("daemon", first.task_id)
        assert again.duplicate and again.task_id == first.task_id
        await k.parked(first.task_id, events=2)

        [message] = await k.scheduler.read_mailbox(first.task_id)
        assert message.text.startswith(f"{UNIT} on ")
        keys = await _item_keys(k, first.task_id)
        assert keys.count(f"mbx:{message.message_id}") == 1
        statuses = [c.status for c in await k.scheduler.history(first.task_id)]
        assert statuses.count(TaskStatus.waiting) >= 2
        assert not any(s.is_terminal for s in statuses)
    # The second event reached the model once, on the turn after the first answer.
    turns_seeing_unit = {
        r.turn for r in k.provider.requests if any(UNIT in text for text in _texts(r))
    }
    assert min(turns_seeing_unit) == 2


async def test_daemon_task_takes_next_event_when_engine_restarts_while_it_waits(
    db_url: str, tmp_path: Path
) -> None:
    async with keel(db_url, tmp_path, role()) as before:
        first_id = await before.first_parked()
    async with keel(db_url, tmp_path, role()) as after:
        second = await after.event("unit-tests", 1002, "d-unit")
        assert second.task_id == first_id
        parked = await after.parked(first_id, events=2)
        assert parked.status is TaskStatus.waiting
        # The restarted worker's model saw the history the first process made.
        [resumed] = [r for r in after.provider.requests if r.turn == 2]
        assert any("value of lint log" in text for text in _texts(resumed))
        assert after.provider.requests[0].turn == 2  # nothing was redone


async def test_daemon_stops_on_request_when_it_is_waiting_for_events(
    db_url: str, tmp_path: Path
) -> None:
    async with keel(db_url, tmp_path, role()) as k:
        first_id = await k.first_parked()
        assert await k.scheduler.transact(k.scheduler.request_cancel, first_id, "operator", None)
        ended = await k.finished(first_id)
        assert ended.status is TaskStatus.canceled


# -- idle lifetime and the successor ---------------------------------------------------------


async def test_daemon_ends_with_summary_after_idle_lifetime_and_successor_follows_it(
    db_url: str, tmp_path: Path
) -> None:
    async with keel(db_url, tmp_path, role(idle_lifetime_s=3600, role={"idle_lifetime_s": 1})) as k:
        first_id = await k.first_parked()
        ended = await k.finished(first_id, timeout=15)
        assert ended.status is TaskStatus.succeeded
        assert ended.result is not None
        assert ended.result["outcome"] == "idle" and ended.result["events"] == 1
        assert "lint failed: unused import" in ended.result["summary"]
        assert "without a new event" in ended.result["summary"]

        successor = await k.event("integration", 1003, "d-integration")
        assert successor.decision == "daemon" and successor.task_id != first_id
        assert successor.task_id is not None
        started = await k.scheduler.get(successor.task_id)
        assert started is not None
        assert (started.follows_task_id, started.objective_key, started.agent) == (
            first_id,
            "daemon:ci-doctor",
            "daemon:ci-doctor",
        )
        await k.parked(successor.task_id, events=1)


# -- the role's deny, limits and purpose -----------------------------------------------------


async def test_daemon_role_is_never_offered_a_denied_tool_and_a_forged_call_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    async with keel(db_url, tmp_path, role()) as k:
        first_id = await k.first_parked()
        await k.event("unit-tests", 1002, "d-unit")
        await k.parked(first_id, events=2)
        calls = await k.db.read(lambda s: tool_calls.all_calls(s, first_id))
    [push] = [c for c in calls if c.name == "git_push"]
    assert push.outcome == "error" and push.result is not None and push.result["is_error"]
    assert not (tmp_path / "pushes.log").exists()  # the tool itself never ran
    offered = {spec.name for r in k.provider.requests for spec in r.tools}
    assert "lookup" in offered and "git_push" not in offered
    assert all(PURPOSE in r.system and "ci-doctor" in r.system for r in k.provider.requests)


LOOPING: dict[str, Any] = {
    "scripts": [
        {
            "turns": [
                {"tool_calls": [_call("lookup", key="1")]},
                {"say": "first handled"},
                {"tool_calls": [_call("lookup", key="2")]},
                {"say": "second handled"},
                *[{"tool_calls": [_call("lookup", key=str(n))]} for n in range(3, 8)],
            ]
        }
    ]
}


async def test_daemon_role_limits_end_its_run_when_one_event_takes_too_many_turns(
    db_url: str, tmp_path: Path
) -> None:
    daemons = role(role={"limits": {"max_turns": 3}})
    async with keel(db_url, tmp_path, daemons, LOOPING) as k:
        first_id = await k.first_parked()
        # Two turns again: within the role's 3, though the task has now used 4 in all.
        await k.event("unit-tests", 1002, "d-unit")
        await k.parked(first_id, events=2)
        await k.event("integration", 1003, "d-integration")
        ended = await k.finished(first_id)
    assert ended.status is TaskStatus.failed and ended.result is not None
    assert ended.result["outcome"] == "limit:max_turns"
    assert ended.result["summary"] == "stopped at a limit: max_turns (3)"
    assert max(r.turn for r in k.provider.requests) == 6  # turns 4, 5, 6: three, then stop


async def test_composition_root_runs_a_daemon_as_its_role_when_configured(
    db_url: str, tmp_path: Path
) -> None:
    """``keel serve`` / ``keel worker`` wiring: the role's agent, and its task parks."""
    daemons = role().model_dump(mode="json")
    tree = {
        "database": {"url": db_url},
        "workspace": {"root": str(tmp_path / "workspaces")},
        "agents": {"default": {}, "fixer": {"instructions": "You fix builds."}},
        "daemons": daemons,
    }
    provider = RecordingModel({"scripts": [{"turns": [{"say": "diagnosed"}]}]})
    app = App(build_config(tree, env={}), provider=provider)
    await app.connect()
    await app.start()
    try:
        signal = to_signal(check_run(), "d-app")
        result = await app.sink.accept(
            signal, provider="github", delivery_id="d-app", raw_kind="check_run"
        )
        assert result.decision == "daemon" and result.task_id is not None
        task_id = result.task_id
        async with asyncio.timeout(20):
            while (task := await app.scheduler.get(task_id)) is None or (
                task.status is not TaskStatus.waiting
            ):
                await asyncio.sleep(0.05)
    finally:
        await app.stop()
    [request] = provider.requests
    offered = {spec.name for spec in request.tools}
    assert "git_commit" in offered and "git_push" not in offered
    assert request.system.startswith("You fix builds.") and PURPOSE in request.system


# -- the task UI -----------------------------------------------------------------------------


async def test_task_ui_shows_daemon_waiting_for_events_when_its_task_is_parked(
    db_url: str, tmp_path: Path
) -> None:
    async with keel(db_url, tmp_path, role()) as k:
        first_id = await k.first_parked()
        app = FastAPI()
        app.include_router(build_ui(k.db, auth=AdminAuth(ServerConfig()).ui))
        with serve(app) as server:
            async with httpx.AsyncClient(base_url=server.url) as client:
                page = (await client.get(f"/ui/tasks/{first_id}")).text
                listing = (await client.get("/ui/tasks?status=waiting")).text
    assert 'data-daemon="ci-doctor" data-daemon-state="waiting"' in page
    assert "ci-doctor · waiting for events" in page
    assert first_id in listing and "daemon · waiting for events" in listing


def _texts(request: ModelRequest) -> list[str]:
    found = []
    for item in request.items:
        if isinstance(item, UserText):
            found.append(item.text)
        elif isinstance(item, ToolResultItem):
            found.append(item.output)
    return found



async def test_daemon_tree_cap_counts_per_event_when_each_event_delegates(
    db_url: str, tmp_path: Path
) -> None:
    """``max_tree_tasks`` bounds what one event may make: a resident role's long-lived task
    is not refused delegation forever once its events together reached the cap."""
    script = {
        "scripts": [
            {"match": "Goal: diagnose", "turns": [{"say": "diagnosed"}]},
            {
                "turns": [
                    {"tool_calls": [_call("delegate", goal="diagnose the lint")]},
                    {"say": "handed on"},
                    {"expect_seen": [UNIT], "tool_calls": [_call("delegate", goal="diagnose")]},
                    {"say": "handed on again"},
                ]
            },
        ]
    }
    daemons = role(role={"limits": {"max_tree_tasks": 2}})
    async with keel(db_url, tmp_path, daemons, script) as k:
        first_id = await k.first_parked()
        await k.event("unit-tests", 1002, "d-unit")
        await k.parked(first_id, events=2)
        calls = await k.db.read(lambda s: tool_calls.all_calls(s, first_id))
        outputs = [str((c.result or {}).get("output", "")) for c in calls if c.name == "delegate"]
        assert len(outputs) == 2
        assert all(json.loads(out)["agent"] == "daemon:ci-doctor" for out in outputs), outputs
        # Children of a resident role end at their answer rather than wait for events.
        for out in outputs:
            child = await k.finished(json.loads(out)["task_id"])
            assert child.status is TaskStatus.succeeded
    # The children run as the role, told that they end at their answer.
    children = [r for r in k.provider.requests if any("Goal: diagnose" in t for t in _texts(r))]
    assert children and all("does not wait for events" in r.system for r in children)
