"""Scheduler behaviour on a real database (each test runs on SQLite and on PostgreSQL)."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from runtime.clock import ManualClock
from runtime.leases import Claimed, NoMatch
from runtime.scheduler import (
    Accepted,
    AlreadyTerminal,
    Appended,
    Duplicate,
    Missing,
    NotFound,
    Scheduler,
)
from runtime.store import deliveries
from runtime.store.engine import Database
from runtime.store.models import Base, DeliveryRow, MailboxMessageRow
from runtime.store.records import SenderPart, TaskResult, TaskStatus
from tests.factories import make_spec, text_part


def _pending_tokens(db: Database, task_id: str, reason: str | None = None) -> list[str]:
    def work(session: Session) -> list[str]:
        query = select(DeliveryRow.token).where(
            DeliveryRow.task_id == task_id, DeliveryRow.consumed_at.is_(None)
        )
        if reason:
            query = query.where(DeliveryRow.reason == reason)
        return list(session.scalars(query))

    return db.run_sync(work)


async def _status(scheduler: Scheduler, task_id: str) -> TaskStatus:
    task = await scheduler.get(task_id)
    assert task is not None
    return task.status


def _count(db: Database, model: type[Base], **where: object) -> int:
    def work(session: Session) -> int:
        query = select(func.count()).select_from(model)
        for key, value in where.items():
            query = query.where(getattr(model, key) == value)
        return session.execute(query).scalar_one()

    return db.run_sync(work)


async def test_schedule_creates_queued_task_with_one_delivery_when_available_now(
    database: Database, scheduler: Scheduler,
) -> None:
    scheduled = await scheduler.transact(scheduler.schedule, make_spec())
    assert scheduled.created
    assert scheduled.task.status is TaskStatus.queued
    assert scheduled.task.root_id == scheduled.task.task_id
    assert len(_pending_tokens(database, scheduled.task.task_id)) == 1


async def test_claim_rejects_token_when_already_consumed(
    database: Database, scheduler: Scheduler
) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    [token] = _pending_tokens(database, task.task_id)
    first = await scheduler.leases.claim(token, "w1")
    second = await scheduler.leases.claim(token, "w2")
    unknown = await scheduler.leases.claim("no-such-token", "w3")
    assert isinstance(first, Claimed)
    assert first.task.status is TaskStatus.running
    assert isinstance(second, NoMatch)
    assert isinstance(unknown, NoMatch)


async def test_a_live_lease_refuses_another_claim_and_an_expired_one_is_taken_over(
    database: Database,
) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock, lease_seconds=10)
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    first = await scheduler.leases.claim(_pending_tokens(database, task.task_id)[0], "w1")
    assert isinstance(first, Claimed)
    def delivery() -> str:
        now = clock.now()
        return database.run_sync(
            lambda s: deliveries.add_delivery(s, task.task_id, "wake", now, now)
        )

    refused = await scheduler.leases.claim(delivery(), "w2")
    assert refused == NoMatch("another worker holds the lease")
    clock.advance(11)
    second = await scheduler.leases.claim(delivery(), "w2")
    assert isinstance(second, Claimed) and second.lease.lease_id != first.lease.lease_id
    assert second.task.status is TaskStatus.running
    # The first holder lost its lease: giving it back changes nothing.
    assert not await database.run(lambda s: scheduler.leases.release(s, first.lease, None))
    history = await scheduler.history(task.task_id)
    assert [c.status for c in history] == [TaskStatus.queued, TaskStatus.running]


async def test_claim_waits_when_delivery_is_in_the_future(database: Database) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock)
    later = clock.now() + timedelta(seconds=60)
    task = (await scheduler.transact(scheduler.schedule, make_spec(available_at=later))).task
    assert task.status is TaskStatus.scheduled
    [token] = _pending_tokens(database, task.task_id)
    assert isinstance(await scheduler.leases.claim(token, "w"), NoMatch)
    clock.advance(61)
    assert isinstance(await scheduler.leases.claim(token, "w"), Claimed)


async def test_expired_lease_yields_exactly_one_recovery_delivery_when_swept_repeatedly(
    database: Database,
) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock, lease_seconds=10)
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    [token] = _pending_tokens(database, task.task_id)
    claimed = await scheduler.leases.claim(token, "w1")
    assert isinstance(claimed, Claimed)
    clock.advance(5)
    assert (await scheduler.transact(scheduler.sweep)).recovered == 0
    clock.advance(6)
    reports = await asyncio.gather(*(scheduler.transact(scheduler.sweep) for _ in range(4)))
    assert sum(r.recovered for r in reports) == 1
    assert len(_pending_tokens(database, task.task_id, "recovery")) == 1
    assert await scheduler.leases.renew(claimed.lease) is None  # the old owner lost it
    recovery = await scheduler.leases.claim_next("w2")
    assert isinstance(recovery, Claimed)
    assert recovery.task.task_id == task.task_id


async def test_renew_extends_lease_when_still_held(database: Database) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock, lease_seconds=10)
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    claimed = await scheduler.leases.claim(_pending_tokens(database, task.task_id)[0], "w1")
    assert isinstance(claimed, Claimed)
    clock.advance(8)
    renewed = await scheduler.leases.renew(claimed.lease)
    assert renewed is not None and renewed.expires_at > claimed.lease.expires_at
    clock.advance(8)
    assert (await scheduler.transact(scheduler.sweep)).recovered == 0


async def test_mailbox_append_returns_duplicate_when_key_repeats(
    database: Database, scheduler: Scheduler
) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    outcomes = [
        await scheduler.transact(
            scheduler.append_mailbox, task.task_id, "k1", [text_part("also Safari")], "u1"
        )
        for _ in range(3)
    ]
    [first, *again] = outcomes
    assert isinstance(first, Appended)
    same = first.message.message_id
    assert all(isinstance(o, Duplicate) and o.message.message_id == same for o in again)
    assert _count(database, MailboxMessageRow, task_id=task.task_id) == 1


async def test_mailbox_append_stores_the_parts_in_the_layout_intake_always_wrote(
    database: Database, scheduler: Scheduler
) -> None:
    # Messages written before the parts were typed are read by the same code: the stored
    # JSON must keep its keys, their order and their values.
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    sender = SenderPart("slack", "U1", "Ada", "https://x.test/p1", "slack:T1:C1:1.2")
    await scheduler.transact(
        scheduler.append_mailbox, task.task_id, "k1", [text_part("also Safari"), sender], "U1"
    )
    rows = database.run_sync(lambda s: list(s.scalars(select(MailboxMessageRow.parts)).all()))
    assert [json.dumps(parts) for parts in rows] == [
        json.dumps(
            [
                {"type": "text", "text": "also Safari"},
                {
                    "type": "sender",
                    "provider": "slack",
                    "id": "U1",
                    "name": "Ada",
                    "url": "https://x.test/p1",
                    "message": "slack:T1:C1:1.2",
                },
            ]
        )
    ]


async def test_mailbox_append_stores_two_when_same_key_targets_two_tasks(
    database: Database,
    scheduler: Scheduler,
) -> None:
    a = (await scheduler.transact(scheduler.schedule, make_spec())).task
    b = (await scheduler.transact(scheduler.schedule, make_spec())).task
    first = await scheduler.transact(scheduler.append_mailbox, a.task_id, "same", [text_part("x")])
    second = await scheduler.transact(scheduler.append_mailbox, b.task_id, "same", [text_part("x")])
    assert isinstance(first, Appended) and isinstance(second, Appended)
    assert _count(database, MailboxMessageRow) == 2


async def test_mailbox_append_concurrent_same_key_stores_one(
    database: Database, scheduler: Scheduler
) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    outcomes = await asyncio.gather(
        *(
            scheduler.transact(scheduler.append_mailbox, task.task_id, "k", [text_part("x")])
            for _ in range(6)
        )
    )
    assert sum(isinstance(o, Appended) for o in outcomes) == 1
    assert _count(database, MailboxMessageRow) == 1


async def test_mailbox_append_returns_already_terminal_and_stores_nothing_when_task_done(
    database: Database,
    scheduler: Scheduler,
) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    await scheduler.transact(
        scheduler.report_result, task.task_id, TaskResult(TaskStatus.succeeded, "done")
    )
    outcome = await scheduler.transact(
        scheduler.append_mailbox, task.task_id, "late", [text_part("x")]
    )
    assert outcome == AlreadyTerminal(TaskStatus.succeeded)
    assert _count(database, MailboxMessageRow) == 0
    assert isinstance(
        await scheduler.transact(scheduler.append_mailbox, "t_missing", "k", []), NotFound
    )


async def test_read_mailbox_returns_messages_after_position_in_order(scheduler: Scheduler) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    for i in range(4):
        await scheduler.transact(
            scheduler.append_mailbox, task.task_id, f"k{i}", [text_part(f"m{i}")]
        )
    after_two = await scheduler.read_mailbox(task.task_id, after=2)
    assert [m.seq for m in after_two] == [3, 4]
    assert [m.text for m in after_two] == ["m2", "m3"]


async def test_report_result_keeps_first_when_reported_twice(scheduler: Scheduler) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    first = await scheduler.transact(
        scheduler.report_result, task.task_id, TaskResult(TaskStatus.succeeded, "one")
    )
    second = await scheduler.transact(
        scheduler.report_result, task.task_id, TaskResult(TaskStatus.failed, "two")
    )
    assert isinstance(first, Accepted)
    assert second == AlreadyTerminal(TaskStatus.succeeded)
    stored = await scheduler.get(task.task_id)
    assert stored is not None and stored.status is TaskStatus.succeeded
    assert stored.result is not None and stored.result["summary"] == "one"
    missing = await scheduler.transact(
        scheduler.report_result, "t_nope", TaskResult(TaskStatus.failed, "x")
    )
    assert isinstance(missing, Missing)


async def test_cancel_of_root_is_seen_by_grandchild(
    database: Database, scheduler: Scheduler
) -> None:
    root = (await scheduler.transact(scheduler.schedule, make_spec())).task
    child = (
        await scheduler.transact(
            scheduler.schedule, make_spec(parent_id=root.task_id, child_key="c")
        )
    ).task
    grandchild = (
        await scheduler.transact(
            scheduler.schedule, make_spec(parent_id=child.task_id, child_key="g")
        )
    ).task
    other = (await scheduler.transact(scheduler.schedule, make_spec())).task
    assert grandchild.depth == 2 and grandchild.root_id == root.task_id
    assert not await scheduler.stop_requested(grandchild.task_id)
    assert await scheduler.transact(scheduler.request_cancel, root.task_id, "user said stop", "U1")
    assert await scheduler.stop_requested(grandchild.task_id)
    assert await scheduler.stop_requested(child.task_id)
    assert not await scheduler.stop_requested(other.task_id)
    assert _pending_tokens(database, grandchild.task_id, "stop")


async def test_child_creation_returns_same_child_when_key_repeats(scheduler: Scheduler) -> None:
    root = (await scheduler.transact(scheduler.schedule, make_spec())).task
    spec = make_spec(parent_id=root.task_id, child_key="call_1_0", message="look at logs")
    first = await scheduler.transact(scheduler.schedule, spec)
    again = await asyncio.gather(*(scheduler.transact(scheduler.schedule, spec) for _ in range(4)))
    assert first.created
    assert all(not s.created and s.task.task_id == first.task.task_id for s in again)
    other_key = await scheduler.transact(
        scheduler.schedule, make_spec(parent_id=root.task_id, child_key="call_1_1")
    )
    assert other_key.created and other_key.task.task_id != first.task.task_id


async def test_waiting_task_wakes_when_mailbox_receives_input(
    database: Database, scheduler: Scheduler
) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    claimed = await scheduler.leases.claim_next("w")
    assert isinstance(claimed, Claimed)

    def park(session: Session) -> bool:
        parked = scheduler.enter_waiting(session, task.task_id)
        scheduler.leases.release(session, claimed.lease, None)
        return parked

    assert database.run_sync(park)
    assert await _status(scheduler, task.task_id) is TaskStatus.waiting
    assert isinstance(await scheduler.leases.claim_next("w"), NoMatch)
    await scheduler.transact(scheduler.append_mailbox, task.task_id, "k", [text_part("more")])
    assert await _status(scheduler, task.task_id) is TaskStatus.queued
    assert isinstance(await scheduler.leases.claim_next("w"), Claimed)


async def test_status_changes_are_timestamped_in_order(scheduler: Scheduler) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    await scheduler.leases.claim_next("w")
    await scheduler.transact(
        scheduler.report_result, task.task_id, TaskResult(TaskStatus.failed, "boom")
    )
    history = await scheduler.history(task.task_id)
    assert [h.status for h in history] == [TaskStatus.queued, TaskStatus.running, TaskStatus.failed]
    assert all(a.at <= b.at for a, b in itertools.pairwise(history))


async def test_sweeper_times_out_overdue_task_and_gives_it_a_stop_tick(database: Database) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock)
    task = (
        await scheduler.transact(
            scheduler.schedule, make_spec(deadline_at=clock.now() + timedelta(seconds=30))
        )
    ).task
    clock.advance(31)
    report = await scheduler.transact(scheduler.sweep)
    assert report.timed_out == 1
    stored = await scheduler.get(task.task_id)
    assert stored is not None and stored.status is TaskStatus.timed_out
    assert _pending_tokens(database, task.task_id, "stop")
