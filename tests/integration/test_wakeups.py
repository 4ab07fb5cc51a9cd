"""Wake-up hints: in-process on SQLite, LISTEN/NOTIFY across connections on PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from runtime.executor.runner import TickResult
from runtime.leases import Claimed, Leases, NoMatch
from runtime.notifier import Notifier
from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from runtime.store.listen import PgListener
from runtime.store.records import Lease
from runtime.worker import Worker
from tests.factories import make_spec
from tests.harness import schedule_task


async def test_notifier_wakes_waiter_when_task_is_scheduled_in_process(database: Database) -> None:
    notifier = Notifier()
    notifier.bind(asyncio.get_running_loop())
    scheduler = Scheduler(database, notifier=notifier)
    waiter = asyncio.create_task(notifier.wait(timeout=30))
    await asyncio.sleep(0)
    await scheduler.transact(scheduler.schedule, make_spec())
    await asyncio.wait_for(waiter, timeout=5)


async def test_notifier_wait_returns_after_timeout_when_nothing_happens() -> None:
    notifier = Notifier()
    notifier.bind(asyncio.get_running_loop())
    started = time.monotonic()
    await notifier.wait(timeout=0.2)
    assert time.monotonic() - started >= 0.19


async def test_listen_wakes_other_process_notifier_when_postgres_commits(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite wakes in process (test above)")
    listening = Notifier()
    listening.bind(asyncio.get_running_loop())
    listener = PgListener(db_url, listening)
    listener.start()
    try:
        assert await asyncio.to_thread(listener.ready.wait, 10)
        writer_db = Database.from_url(db_url)  # a separate engine: no shared in-process notifier
        waiter = asyncio.create_task(listening.wait(timeout=30))
        await asyncio.sleep(0)
        await schedule_task(writer_db)
        await asyncio.wait_for(waiter, timeout=10)
        writer_db.close()
    finally:
        listener.stop()


class _CountingLeases(Leases):
    looks = 0

    async def claim_next(
        self, worker: str, *, scan: int = 8, machine: str | None = None
    ) -> Claimed | NoMatch:
        self.looks += 1
        return await super().claim_next(worker, scan=scan, machine=machine)


class _RecordingRunner:
    """The worker's runner port: notes each task it is given, and lets it go."""

    def __init__(self) -> None:
        self.driven: list[str] = []

    async def tick(self, lease: Lease) -> TickResult:
        self.driven.append(lease.task_id)
        return TickResult("released", "")

    def forget(self, lease: Lease) -> None:
        pass


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_wake_up_costs_one_look_however_many_loops_are_idle(database: Database) -> None:
    """Eight idle loops: each wake-up is one look for work, not eight; work found hands the
    turn on at once, so three tasks queued together are all taken without waiting for the
    (here 30 s) poll interval."""
    scheduler = Scheduler(database)
    leases = scheduler.leases = _CountingLeases(database, scheduler.clock, scheduler.lease_seconds)
    runner = _RecordingRunner()
    worker = Worker(scheduler, runner, concurrency=8, poll_interval_s=30)  # type: ignore[arg-type]
    running = asyncio.create_task(worker.run())
    try:
        await _until(lambda: leases.looks >= 1)
        await asyncio.sleep(0.2)
        assert leases.looks == 1  # one loop looks; the other seven wait their turn
        for _ in range(3):
            scheduler.wake()
            await asyncio.sleep(0.1)
        assert leases.looks == 4
        ids = [
            (await scheduler.transact(scheduler.schedule, make_spec())).task.task_id
            for _ in range(3)
        ]
        await _until(lambda: len(runner.driven) == 3)
        assert sorted(runner.driven) == sorted(ids)
    finally:
        worker.stop()
        await asyncio.wait_for(running, timeout=5)
