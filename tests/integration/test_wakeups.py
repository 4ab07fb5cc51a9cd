"""Wake-up hints: in-process on SQLite, LISTEN/NOTIFY across connections on PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime.notifier import Notifier
from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from runtime.store.listen import PgListener
from tests.factories import make_spec


async def test_notifier_wakes_waiter_when_task_is_scheduled_in_process(database: Database) -> None:
    notifier = Notifier()
    notifier.bind(asyncio.get_running_loop())
    scheduler = Scheduler(database, notifier=notifier)
    waiter = asyncio.create_task(notifier.wait(timeout=30))
    await asyncio.sleep(0)
    await scheduler.schedule(make_spec())
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
        await Scheduler(writer_db).schedule(make_spec())
        await asyncio.wait_for(waiter, timeout=10)
        writer_db.close()
    finally:
        listener.stop()
