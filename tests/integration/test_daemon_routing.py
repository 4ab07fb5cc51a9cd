"""Daemons on a real database: one activation per burst, and never a reaction to ourselves.

Signals come from real check_run webhook payloads in the payload corpus, through the GitHub
adapter's own translation.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from adapters.emulators.corpus import corpora_root
from adapters.github.signals import GitHubIdentity, signal_from_github
from routing.config import DaemonsConfig, RoutingConfig
from routing.intake import IngestResult, Router
from routing.policy import RoutingPolicy
from routing.signal import Signal
from runtime.clock import ManualClock
from runtime.scheduler import Scheduled, Scheduler
from runtime.store.engine import Database, Transaction
from runtime.store.models import TaskRow
from runtime.store.records import TaskResult, TaskSpec, TaskStatus

CHECK_RUN = corpora_root() / "github" / "webhooks" / "check_run"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
US = GitHubIdentity(bot_login="keel-bot", app_id=4242)
REPO = "Codertocat/Hello-World"

DAEMONS = DaemonsConfig.model_validate(
    {
        "roles": [
            {
                "id": "ci-doctor",
                "agent": "fixer",
                "purpose": "Diagnose failed CI runs and propose a fix.",
                "watch": [
                    {"provider": "github", "kind": "check_run", "conclusion": "failure",
                     "repo": REPO}
                ],
            }
        ]
    }
)
POLICY = RoutingPolicy.from_config(
    RoutingConfig(), DAEMONS, github_bot_login=US.bot_login, github_app_id=US.app_id
)


def check_run(name: str = "completed.1.json", **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((CHECK_RUN / name).read_text(encoding="utf-8"))
    payload = copy.deepcopy(payload)
    payload["check_run"].update(changes.pop("check_run", {}))
    payload["sender"].update(changes.pop("sender", {}))
    return payload


def to_signal(payload: dict[str, Any], delivery_id: str) -> Signal:
    signal = signal_from_github("check_run", delivery_id, payload, US, received_at=NOW)
    assert isinstance(signal, Signal), signal
    return signal


class SlowToSchedule(Scheduler):
    """Widens the window between "no owner yet" and the owner existing, as a busy store does."""

    def schedule(self, session: Transaction, spec: TaskSpec) -> Scheduled:
        time.sleep(0.05)
        return super().schedule(session, spec)


def make_router(database: Database) -> Router:
    clock = ManualClock(NOW)
    scheduler = SlowToSchedule(database, clock=clock)
    return Router(scheduler, database, POLICY, clock, retry_delays=(0,))


async def ingest(router: Router, signal: Signal) -> IngestResult:
    return await router.ingest(
        signal, provider="github", delivery_id=signal.delivery_id, raw_kind="check_run"
    )


def daemon_tasks(database: Database) -> list[TaskRow]:
    def work(session: Any) -> list[TaskRow]:
        query = select(TaskRow).where(TaskRow.objective_key == "daemon:ci-doctor")
        return list(session.scalars(query))

    return database.run_sync(work)


def burst() -> tuple[Signal, Signal]:
    lint = to_signal(check_run(), "delivery-lint")
    tests = to_signal(check_run(check_run={"id": 128620229, "name": "unit-tests"}), "delivery-ut")
    return lint, tests


async def test_two_failures_in_a_burst_become_one_activation_when_a_daemon_watches(
    database: Database,
) -> None:
    router = make_router(database)
    results = await asyncio.gather(*(ingest(router, s) for s in burst()))
    [task] = daemon_tasks(database)
    assert {(r.decision, r.task_id) for r in results} == {("daemon", task.task_id)}
    # The role runs as its own agent (``fixer`` narrowed by the role), see test_daemon_lifecycle.
    assert (task.agent, task.repo, task.status) == ("daemon:ci-doctor", REPO, "queued")
    mailbox = await router.scheduler.read_mailbox(task.task_id)
    assert len(mailbox) == 1
    # Whichever event came first started the task; the other one is in its mailbox.
    assert {task.message.split("\n")[0], mailbox[0].text.split("\n")[0]} == {
        "Octocoders-linter: failure on ec26c3e57ca3a959ca5aad62de7213c562f8c821",
        "unit-tests: failure on ec26c3e57ca3a959ca5aad62de7213c562f8c821",
    }


async def test_daemon_ignores_check_run_when_caused_by_its_own_push(database: Database) -> None:
    router = make_router(database)
    ours = to_signal(check_run(sender={"login": "keel-bot", "type": "Bot"}), "delivery-ours")
    result = await ingest(router, ours)
    assert (result.decision, result.reason) == ("drop", "self_generated")
    assert daemon_tasks(database) == []


async def test_daemon_starts_next_activation_linked_when_its_task_has_finished(
    database: Database,
) -> None:
    router = make_router(database)
    lint, tests = burst()
    first = await ingest(router, lint)
    assert first.task_id is not None
    done = TaskResult(TaskStatus.succeeded, "ok")
    await router.scheduler.transact(router.scheduler.report_result, first.task_id, done)
    second = await ingest(router, tests)
    assert second.decision == "daemon" and second.task_id != first.task_id
    assert {t.task_id for t in daemon_tasks(database)} == {first.task_id, second.task_id}
    assert second.task_id is not None
    successor = await router.scheduler.get(second.task_id)
    assert successor is not None and successor.follows_task_id == first.task_id
    assert second.reason == f"follows {first.task_id}"


async def test_daemon_leaves_a_passing_check_run_when_only_failures_are_watched(
    database: Database,
) -> None:
    router = make_router(database)
    passing = to_signal(check_run("completed.json"), "delivery-green")
    result = await ingest(router, passing)
    assert (result.decision, result.reason) == ("drop", "not_addressed")
    assert daemon_tasks(database) == []
