"""``keel db upgrade`` on an empty database and again on an upgraded one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import inspect

from runtime.store.engine import make_engine
from runtime.store.migrate import is_current

KEEL = [sys.executable, "-c", "from adapters.cli import main; main()"]
TABLES = {
    "tasks",
    "deliveries",
    "executions",
    "mailbox_messages",
    "transcript_items",
    "tool_calls",
    "evidence",
    "outbox",
    "signals",
    "route_attempts",
    "task_status_changes",
}


def _upgrade(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KEEL_DATABASE_URL": url}
    return subprocess.run(
        [*KEEL, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120
    )


def test_db_upgrade_creates_schema_when_database_is_empty(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    result = _upgrade(url)
    assert result.returncode == 0, result.stderr
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) >= TABLES
    assert is_current(engine)
    engine.dispose()


def test_db_upgrade_is_a_noop_when_already_current(db_url: str) -> None:
    # db_url is already migrated by the fixture, on SQLite and on PostgreSQL.
    first = _upgrade(db_url)
    second = _upgrade(db_url)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "schema is current" in second.stdout
    engine = make_engine(db_url)
    assert is_current(engine)
    engine.dispose()


def test_db_upgrade_recreates_schema_when_every_table_was_dropped(db_url: str) -> None:
    engine = make_engine(db_url)
    cascade = " CASCADE" if engine.dialect.name == "postgresql" else ""
    with engine.begin() as conn:
        for table in inspect(conn).get_table_names():
            conn.exec_driver_sql(f'DROP TABLE "{table}"{cascade}')
    engine.dispose()
    result = _upgrade(db_url)
    assert result.returncode == 0, result.stderr
    engine = make_engine(db_url)
    assert set(inspect(engine).get_table_names()) >= TABLES
    engine.dispose()


def test_migrations_match_the_models_when_upgraded(db_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from runtime.store.models import Base

    engine = make_engine(db_url)
    with engine.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert differences == []
