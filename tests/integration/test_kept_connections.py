"""Transactions run on connections their threads keep, and a broken one is replaced."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text

from runtime.errors import Retryable
from runtime.store.engine import Database, Transaction
from tests.databases import admin_url


def _driver_connection(session: Transaction) -> int:
    return id(session.connection().connection.driver_connection)


def _backend(session: Transaction) -> int:
    return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


async def test_one_thread_keeps_one_connection_for_its_transactions(database: Database) -> None:
    alone = Database(database.engine, threads=1)
    try:
        first = await alone.run(_driver_connection)
        assert [await alone.run(_driver_connection) for _ in range(20)] == [first] * 20
    finally:
        alone.close()


async def test_bursts_of_reads_open_no_more_connections_than_there_are_threads(
    database: Database,
) -> None:
    """Bursts of eight reads at once on eight threads (SQLite's pool keeps five between
    bursts) keep eight connections: none is opened for a burst and thrown away after it."""
    readers = Database(database.engine, threads=8)
    opened: list[object] = []

    def count(dbapi_connection: Any, record: Any) -> None:
        opened.append(dbapi_connection)

    def slow_read(session: Transaction) -> int:
        time.sleep(0.005)  # the reads of a burst overlap
        return int(session.execute(text("SELECT 1")).scalar_one())

    event.listen(database.engine, "connect", count)
    try:
        answers = []
        for _ in range(15):
            answers += await asyncio.gather(*(readers.read(slow_read) for _ in range(8)))
    finally:
        event.remove(database.engine, "connect", count)
        readers.close()
    assert answers == [1] * 120
    assert len(opened) <= 8, f"{len(opened)} connections opened for 15 bursts on 8 threads"


def _is_closed(driver: Any) -> bool:
    closed = getattr(driver, "closed", None)  # psycopg says so
    if closed is not None:
        return bool(closed)
    try:  # sqlite3 refuses a closed connection
        driver.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


async def test_a_thread_idle_for_a_while_closes_its_connection(database: Database) -> None:
    """A kept connection serves back-to-back transactions; a hand-off thread that has had none
    for ``kept_idle_s`` closes its own for good, not into the pool (so a burst, or a worker
    that moved its transactions onto its loop, leaves no idle connections open), and its next
    transaction opens another."""
    pool: Any = database.engine.pool
    idle = Database(database.engine, threads=2, kept_idle_s=1.0)
    both_busy = threading.Barrier(2, timeout=5)  # two reads at once: one on each thread
    drivers: list[Any] = []

    def together(session: Transaction) -> int:
        drivers.append(session.connection().connection.driver_connection)
        both_busy.wait()
        return int(session.execute(text("SELECT 1")).scalar_one())

    try:
        before = pool.checkedout()
        assert list(await asyncio.gather(idle.read(together), idle.read(together))) == [1, 1]
        assert pool.checkedout() == before + 2  # each thread keeps its connection
        assert len({id(d) for d in drivers}) == 2
        # A thread closes its driver, then gives the pool its slot back. The drivers are
        # looked at only after that: a sqlite3 connection used from this thread while its own
        # thread closes it can crash the interpreter.
        for _ in range(100):
            if pool.checkedout() == before:
                break
            await asyncio.sleep(0.1)
        assert pool.checkedout() == before, "idle threads kept their connections open"
        assert all(_is_closed(d) for d in drivers), "a connection went back to the pool open"
        assert await idle.read(lambda s: int(s.execute(text("SELECT 2")).scalar_one())) == 2
        assert pool.checkedout() == before + 1
    finally:
        idle.close()


def _statement_is_its_own_transaction(session: Transaction) -> bool:
    # Inside BEGIN ... COMMIT the statement starts after the transaction; on its own, both
    # start together.
    query = text("SELECT statement_timestamp() = transaction_timestamp()")
    return bool(session.execute(query).scalar_one())


async def test_postgresql_reads_skip_begin_and_commit_and_writes_keep_them(
    database: Database,
) -> None:
    if not database.is_postgres:
        pytest.skip("PostgreSQL's: SQLite reads take a deferred snapshot, as before")
    alone = Database(database.engine, threads=1)  # one thread: one connection for both
    try:
        for _ in range(3):
            assert await alone.read(_statement_is_its_own_transaction)
            assert not await alone.run(_statement_is_its_own_transaction)
    finally:
        alone.close()


async def test_a_connection_the_server_dropped_fails_once_then_is_replaced(
    database: Database,
) -> None:
    if not database.is_postgres:
        pytest.skip("PostgreSQL's: no server ends a SQLite connection")
    alone = Database(database.engine, threads=1)
    try:
        pid = await alone.run(_backend)
        with database.engine.connect() as admin:
            admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            admin.commit()
        with pytest.raises(Retryable):
            await alone.run(_backend)
        again = await alone.run(_backend)
        assert again != pid
        assert await alone.run(_backend) == again
        # While the database refuses connections, opening the replacement fails as
        # retryable too (a webhook then answers 503, not 500); afterwards it opens.
        name = database.engine.url.database
        server = create_engine(str(admin_url()), isolation_level="AUTOCOMMIT")
        with server.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": again})
            try:
                for _ in range(2):
                    with pytest.raises(Retryable):
                        await alone.run(_backend)
            finally:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        server.dispose()
        assert await alone.run(_backend) not in (pid, again)
    finally:
        alone.close()
