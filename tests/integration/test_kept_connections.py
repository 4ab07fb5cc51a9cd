"""Transactions run on connections their threads keep, and a broken one is replaced."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

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
        admin = create_engine(str(admin_url()), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": again})
            try:
                for _ in range(2):
                    with pytest.raises(Retryable):
                        await alone.run(_backend)
            finally:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
        assert await alone.run(_backend) not in (pid, again)
    finally:
        alone.close()
