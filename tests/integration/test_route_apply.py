"""Route application on a real database (each test runs on SQLite and on PostgreSQL).

Fakes sit only at the scheduler, a port Keel owns: each subclass reproduces one race or fault
(the task finishing between lookup and append, a lagging NotFound, a crash mid-apply).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, event, func, select

from routing.config import DaemonsConfig, RoutingConfig
from routing.intake import IngestResult, Router
from routing.policy import RoutingPolicy
from routing.signal import Actor, Ignored, Signal
from runtime.clock import ManualClock
from runtime.errors import Retryable
from runtime.reporting import ReportingPolicy
from runtime.scheduler import AppendOutcome, NotFound, Scheduled, Scheduler
from runtime.store import signals as store
from runtime.store.engine import Database, Transaction
from runtime.store.models import MailboxMessageRow, SignalRow, TaskRow
from runtime.store.outbox import posts_of_task
from runtime.store.records import (
    MailboxPart,
    SignalActor,
    Task,
    TaskResult,
    TaskSpec,
    TaskStatus,
)
from tests import factories
from tests.factories import make_spec

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
THREAD_REF = factories.THREAD
THREAD = str(THREAD_REF)  # as the objective key and the outbox store it
POLICY = RoutingPolicy.from_config(
    RoutingConfig(channel_repos={"C1": "acme/api"}),
    DaemonsConfig(),
    slack_allowed_users=("U1", "U2"),
)


def follow_up(**overrides: Any) -> Signal:
    """A follow-up from alice in THREAD: a thread reply without a mention."""
    return factories.make_signal(**{"delivery_id": "Ev-follow-up", **overrides})


def mention(**overrides: Any) -> Signal:
    values = {"kind": "mention", "addresses_bot": True, "delivery_id": "Ev-mention"}
    return follow_up(**{**values, "dedupe_key": "slack:T1:C1:1700000000.000300", **overrides})


def make_router(
    database: Database, scheduler: Scheduler | None = None, policy: RoutingPolicy = POLICY
) -> Router:
    clock = ManualClock(NOW)
    return Router(
        scheduler or Scheduler(database, clock=clock), database, policy, clock,
        retry_delays=(0, 0),
    )


async def ingest(router: Router, signal: Signal) -> IngestResult:
    return await router.ingest(
        signal, provider=signal.provider, delivery_id=signal.delivery_id, raw_kind=signal.kind
    )


async def start_task(scheduler: Scheduler, **overrides: Any) -> Task:
    spec = make_spec(origin_thread_ref=THREAD_REF, objective_key=THREAD, requested_by="U1")
    fields = {**{f: getattr(spec, f) for f in spec.__slots__}, **overrides}
    return (await scheduler.transact(scheduler.schedule, TaskSpec(**fields))).task


def count(database: Database, model: Any, **where: Any) -> int:
    def work(session: Any) -> int:
        query = select(func.count()).select_from(model)
        for key, value in where.items():
            query = query.where(getattr(model, key) == value)
        return int(session.execute(query).scalar_one())

    return database.run_sync(work)


def tasks_for(database: Database, objective_key: str) -> list[TaskRow]:
    def work(session: Any) -> list[TaskRow]:
        query = select(TaskRow).where(TaskRow.objective_key == objective_key)
        return list(session.scalars(query.order_by(TaskRow.created_at)))

    return database.run_sync(work)


def outcomes(database: Database, signal_id: str) -> list[str]:
    return [a.outcome for a in database.run_sync(lambda s: store.attempts_for(s, signal_id))]


# -- faults at the scheduler port -------------------------------------------------------------


class FinishesFirst(Scheduler):
    """The target task completes between routing's lookup and its append."""

    def append_mailbox(
        self, session: Transaction, task_id: str, key: str, parts: Sequence[MailboxPart],
        author: str | None = None,
    ) -> AppendOutcome:
        self.report_result(session, task_id, TaskResult(TaskStatus.succeeded, "done"))
        return super().append_mailbox(session, task_id, key, parts, author)


class LaggingNotFound(Scheduler):
    """Answers NotFound to every append while the task itself stays readable."""

    def append_mailbox(
        self, session: Transaction, task_id: str, key: str, parts: Sequence[MailboxPart],
        author: str | None = None,
    ) -> AppendOutcome:
        return NotFound(task_id)


class Vanished(Scheduler):
    """The target task is deleted between routing's lookup and its append: the append answers
    NotFound and the read-back finds nothing either."""

    def append_mailbox(
        self, session: Transaction, task_id: str, key: str, parts: Sequence[MailboxPart],
        author: str | None = None,
    ) -> AppendOutcome:
        session.execute(delete(TaskRow).where(TaskRow.task_id == task_id))
        return super().append_mailbox(session, task_id, key, parts, author)


class Flaky(Scheduler):
    """The store refuses the first ``failures`` appends (each one a whole transaction)."""

    def __init__(self, *args: Any, failures: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures = failures
        self.keys: list[str] = []

    def append_mailbox(
        self, session: Transaction, task_id: str, key: str, parts: Sequence[MailboxPart],
        author: str | None = None,
    ) -> AppendOutcome:
        self.keys.append(key)
        if self.failures:
            self.failures -= 1
            raise Retryable("database unavailable: OperationalError")
        return super().append_mailbox(session, task_id, key, parts, author)


class SlowToSchedule(Scheduler):
    """Widens the window between "no owner yet" and the owner existing, as a busy store does."""

    def schedule(self, session: Transaction, spec: TaskSpec) -> Scheduled:
        time.sleep(0.05)
        return super().schedule(session, spec)


class CrashesScheduling(Scheduler):
    """The process dies while the task is being made: its transaction never commits."""

    def schedule(self, session: Transaction, spec: TaskSpec) -> Scheduled:
        super().schedule(session, spec)
        raise RuntimeError("killed")


# -- appends --------------------------------------------------------------------------------


async def test_follow_up_is_appended_once_when_delivered_three_times(database: Database) -> None:
    router = make_router(database)
    task = await start_task(router.scheduler)
    results = [await ingest(router, follow_up()) for _ in range(3)]
    assert [r.duplicate for r in results] == [False, True, True]
    assert {(r.decision, r.task_id) for r in results} == {("append", task.task_id)}
    assert count(database, SignalRow) == 1
    messages = await router.scheduler.read_mailbox(task.task_id)
    assert [m.text for m in messages] == ["it only happens in Safari"]
    assert messages[0].idempotency_key == "slack:T1:C1:1700000000.000200"
    assert messages[0].author == "U1"


async def test_follow_up_is_appended_once_when_delivered_three_times_concurrently(
    database: Database,
) -> None:
    router = make_router(database)
    task = await start_task(router.scheduler)
    # Two routers stand in for two request handlers that do not share in-process locks.
    other = make_router(database)
    results = await asyncio.gather(
        ingest(router, follow_up()), ingest(other, follow_up()), ingest(router, follow_up())
    )
    assert sorted(r.duplicate for r in results) == [False, True, True]
    assert count(database, SignalRow) == 1
    assert count(database, MailboxMessageRow, task_id=task.task_id) == 1


async def test_same_message_is_appended_once_when_two_events_carry_it(database: Database) -> None:
    # Slack sends `message` and `app_mention` for one post: two event ids, one dedupe key.
    router = make_router(database)
    task = await start_task(router.scheduler)
    deliveries = [mention(delivery_id=f"Ev-{n}") for n in range(3)]
    results = await asyncio.gather(*(ingest(router, s) for s in deliveries))
    assert sorted(r.decision for r in results) == ["append", "drop", "drop"]
    assert {r.reason for r in results if r.decision == "drop"} == {"duplicate"}
    assert count(database, SignalRow) == 3
    assert count(database, MailboxMessageRow, task_id=task.task_id) == 1


async def test_append_retries_under_the_same_key_when_the_store_is_briefly_down(
    database: Database,
) -> None:
    clock = ManualClock(NOW)
    # The first refusal abandons the admitting transaction; the plan is stored and retried.
    scheduler = Flaky(database, clock=clock, failures=3)
    router = make_router(database, scheduler)
    task = await start_task(scheduler)
    result = await ingest(router, follow_up())
    assert (result.decision, result.task_id) == ("append", task.task_id)
    assert outcomes(database, result.signal_id) == ["retryable", "retryable", "appended"]
    assert set(scheduler.keys) == {"slack:T1:C1:1700000000.000200"}


async def test_signal_stays_pending_when_transient_errors_outlast_the_retries(
    database: Database,
) -> None:
    scheduler = Flaky(database, clock=ManualClock(NOW), failures=4)
    router = make_router(database, scheduler)
    task = await start_task(scheduler)
    result = await ingest(router, follow_up())
    assert result.decision == "pending"
    resumed = await make_router(database).resume_pending(older_than=timedelta(0))
    assert [(r.decision, r.task_id) for r in resumed] == [("append", task.task_id)]
    assert count(database, MailboxMessageRow, task_id=task.task_id) == 1


# -- the owner changes underneath -----------------------------------------------------------


async def test_one_linked_new_task_when_target_finishes_between_lookup_and_append(
    database: Database,
) -> None:
    scheduler = FinishesFirst(database, clock=ManualClock(NOW))
    router = make_router(database, scheduler)
    old = await start_task(scheduler)
    result = await ingest(router, follow_up())
    assert result.decision == "new_task"
    tasks = {t.task_id: t for t in tasks_for(database, THREAD)}
    assert set(tasks) == {old.task_id, result.task_id}
    new = tasks[result.task_id or ""]
    assert new.follows_task_id == old.task_id
    assert new.message == "it only happens in Safari"  # nothing lost
    assert new.status == "queued"
    assert count(database, MailboxMessageRow) == 0
    assert outcomes(database, result.signal_id) == ["already_terminal:succeeded", "scheduled"]


async def test_no_second_owner_and_escalated_when_not_found_but_task_still_active(
    database: Database,
) -> None:
    scheduler = LaggingNotFound(database, clock=ManualClock(NOW))
    router = make_router(database, scheduler)
    task = await start_task(scheduler)
    result = await ingest(router, follow_up())
    assert result.decision == "escalated"
    assert result.task_id == task.task_id
    assert result.reason is not None and "not starting a second owner" in result.reason
    assert len(tasks_for(database, THREAD)) == 1
    attempts = database.run_sync(lambda s: store.attempts_for(s, result.signal_id))
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert {(a.outcome, a.target_task_id, a.idempotency_key) for a in attempts} == {
        ("not_found:active", task.task_id, "slack:T1:C1:1700000000.000200")
    }
    stored = database.run_sync(lambda s: store.get_signal(s, result.signal_id))
    assert stored is not None and stored.decision == "escalated"


async def test_new_task_without_link_when_not_found_and_task_is_gone(database: Database) -> None:
    scheduler = Vanished(database, clock=ManualClock(NOW))
    router = make_router(database, scheduler)
    old = await start_task(scheduler)
    result = await ingest(router, follow_up())
    assert result.decision == "new_task"
    new = next(t for t in tasks_for(database, THREAD) if t.task_id == result.task_id)
    assert new.task_id != old.task_id and new.follows_task_id is None
    assert outcomes(database, result.signal_id) == ["not_found:missing", "scheduled"]


async def test_follow_up_starts_linked_task_when_the_owner_already_finished(
    database: Database,
) -> None:
    router = make_router(database)
    old = await start_task(router.scheduler)
    done = TaskResult(TaskStatus.succeeded, "ok")
    await router.scheduler.transact(router.scheduler.report_result, old.task_id, done)
    result = await ingest(router, mention(text="and the changelog too"))
    assert result.decision == "new_task"
    new = await router.scheduler.get(result.task_id or "")
    assert new is not None
    assert (new.follows_task_id, new.message) == (old.task_id, "and the changelog too")


async def test_mention_starts_task_with_spec_from_policy_when_thread_is_quiet(
    database: Database,
) -> None:
    router = make_router(database)
    result = await ingest(router, mention(text="fix the login bug"))
    assert result.decision == "new_task" and result.task_id is not None
    task = await router.scheduler.get(result.task_id)
    assert task is not None
    assert (task.agent, task.message, task.repo) == ("default", "fix the login bug", "acme/api")
    assert (task.origin_thread_ref, task.objective_key) == (THREAD_REF, THREAD)
    assert task.requested_by == "U1"
    assert task.status is TaskStatus.queued


async def test_two_mentions_in_a_burst_share_one_new_task_when_thread_is_quiet(
    database: Database,
) -> None:
    router = make_router(database, SlowToSchedule(database, clock=ManualClock(NOW)))
    first = mention(text="fix the login bug")
    second = mention(delivery_id="Ev-2", dedupe_key="slack:T1:C1:1700000000.000400", text="+ios")
    results = await asyncio.gather(ingest(router, first), ingest(router, second))
    assert sorted(r.decision for r in results) == ["append", "new_task"]
    [task] = tasks_for(database, THREAD)
    assert count(database, MailboxMessageRow, task_id=task.task_id) == 1


# -- stop ------------------------------------------------------------------------------------


async def test_stop_from_the_requester_records_cancel_when_task_is_active(
    database: Database,
) -> None:
    router = make_router(database)
    task = await start_task(router.scheduler)
    result = await ingest(router, follow_up(text="stop", command="stop"))
    assert (result.decision, result.task_id) == ("stop", task.task_id)
    stopped = await router.scheduler.get(task.task_id)
    assert stopped is not None and stopped.cancel_requested_at is not None
    assert await router.scheduler.stop_requested(task.task_id)
    assert outcomes(database, result.signal_id) == ["cancel_requested"]
    assert count(database, MailboxMessageRow) == 0  # a stop is never prose in the mailbox


async def test_stop_is_refused_when_the_user_is_not_authorised(database: Database) -> None:
    router = make_router(database)
    task = await start_task(router.scheduler)
    stranger = Actor(id="U9", name="mallory", is_bot=False, is_self=False)
    result = await ingest(router, follow_up(text="stop", command="stop", actor=stranger))
    assert (result.decision, result.reason) == ("drop", "unauthorised")
    unchanged = await router.scheduler.get(task.task_id)
    assert unchanged is not None and unchanged.cancel_requested_at is None


# -- drops and unknown events ---------------------------------------------------------------


async def test_unknown_event_is_stored_as_drop_with_reason_when_ignored(
    database: Database,
) -> None:
    router = make_router(database)
    kwargs = {"provider": "github", "delivery_id": "d-ping", "raw_kind": "ping"}
    first = await router.ingest(Ignored("unsupported", "ping"), **kwargs)
    again = await router.ingest(Ignored("unsupported", "ping"), **kwargs)
    assert (first.decision, first.reason, first.duplicate) == ("drop", "unsupported", False)
    assert again.duplicate and again.signal_id == first.signal_id
    stored = database.run_sync(lambda s: store.get_signal(s, first.signal_id))
    assert stored is not None
    assert (stored.dedupe_key, stored.kind, stored.text) == ("drop:github:d-ping", "ping", "ping")
    assert stored.actor is None and stored_actor(database, first.signal_id) == {}
    assert count(database, SignalRow) == 1


async def test_self_generated_signal_is_dropped_in_the_admitting_transaction(
    database: Database,
) -> None:
    router = make_router(database)
    us = Actor(id="W111", name="keel", is_bot=True, is_self=True)
    result = await ingest(router, mention(actor=us))
    assert (result.decision, result.reason) == ("drop", "self_generated")
    assert outcomes(database, result.signal_id) == []
    assert count(database, TaskRow) == 0
    stored = database.run_sync(lambda s: store.get_signal(s, result.signal_id))
    assert stored is not None and stored.actor == SignalActor("W111", "keel", True, True)
    assert stored_actor(database, result.signal_id) == {
        "id": "W111", "name": "keel", "is_bot": True, "is_self": True, "permission": None
    }


def stored_actor(database: Database, signal_id: str) -> object:
    """The actor as its JSON column holds it."""
    query = select(SignalRow.actor).where(SignalRow.signal_id == signal_id)
    return database.run_sync(lambda s: s.scalar(query))


# -- crash and resume -----------------------------------------------------------------------


async def test_resume_pending_applies_a_pending_signal_exactly_once_when_a_crash_left_it(
    database: Database,
) -> None:
    crashed = make_router(database, CrashesScheduling(database, clock=ManualClock(NOW)))
    with pytest.raises(RuntimeError, match="killed"):
        await ingest(crashed, mention(text="fix the login bug"))
    [pending] = database.run_sync(lambda s: store.pending_signals(s, NOW, 10))
    assert (pending.decision, pending.reason) == ("pending", "new_task")

    restarted = make_router(database)
    resumed = await restarted.resume_pending(older_than=timedelta(0))
    again = await restarted.resume_pending(older_than=timedelta(0))
    [task] = tasks_for(database, THREAD)
    assert [(r.decision, r.task_id) for r in resumed] == [("new_task", task.task_id)]
    assert again == []
    redelivered = await ingest(restarted, mention(text="fix the login bug"))
    assert redelivered.duplicate and redelivered.task_id == task.task_id


async def test_resume_pending_leaves_recent_signals_when_younger_than_the_grace(
    database: Database,
) -> None:
    crashed = make_router(database, CrashesScheduling(database, clock=ManualClock(NOW)))
    with pytest.raises(RuntimeError):
        await ingest(crashed, mention())
    assert await make_router(database).resume_pending(older_than=timedelta(seconds=30)) == []


# -- the request path is one transaction ------------------------------------------------------


@pytest.mark.parametrize("kind", ["mention", "follow_up", "stop"])
async def test_request_path_commits_once_with_its_acknowledgement(
    database: Database, kind: str
) -> None:
    router = make_router(database)
    router.reporting = ReportingPolicy()
    if kind != "mention":
        await start_task(router.scheduler)
    signal = {
        "mention": mention(text="fix the login bug"),
        "follow_up": follow_up(),
        "stop": follow_up(text="stop", command="stop"),
    }[kind]
    commits: list[object] = []

    def count_commit(connection: object) -> None:
        commits.append(connection)

    event.listen(database.engine, "commit", count_commit)
    try:
        result = await ingest(router, signal)
    finally:
        event.remove(database.engine, "commit", count_commit)
    assert result.decision == {"mention": "new_task", "follow_up": "append", "stop": "stop"}[kind]
    assert len(commits) == 1
    [ack] = database.run_sync(lambda s: posts_of_task(s, result.task_id or ""))
    assert (ack.purpose, ack.key) == ("ack", f"ack:{result.signal_id}")


async def test_resumed_plan_gets_its_acknowledgement(database: Database) -> None:
    crashed = make_router(database, CrashesScheduling(database, clock=ManualClock(NOW)))
    with pytest.raises(RuntimeError, match="killed"):
        await ingest(crashed, mention(text="fix the login bug"))
    restarted = make_router(database)
    restarted.reporting = ReportingPolicy()
    [resumed] = await restarted.resume_pending(older_than=timedelta(0))
    posts = database.run_sync(lambda s: posts_of_task(s, resumed.task_id or ""))
    assert [(p.purpose, p.thread_ref) for p in posts] == [("ack", THREAD_REF)]


async def test_escalation_is_queued_with_the_decision_that_made_it(database: Database) -> None:
    router = make_router(database, LaggingNotFound(database, clock=ManualClock(NOW)))
    router.reporting = ReportingPolicy()
    task = await start_task(router.scheduler)
    result = await ingest(router, follow_up())
    assert result.decision == "escalated"
    posts = database.run_sync(lambda s: posts_of_task(s, task.task_id))
    assert [(p.purpose, p.thread_ref, p.action) for p in posts] == [
        ("escalation", THREAD_REF, "post")
    ]
    assert "not start a second one" in posts[0].body
