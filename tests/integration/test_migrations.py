"""``keel db upgrade`` on an empty database and again on an upgraded one."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, insert, inspect, select, update

from runtime.store import migrate
from runtime.store.engine import make_engine
from runtime.store.migrate import is_current
from runtime.store.models import OutboxRow
from runtime.threads import parse_landed, parse_thread

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


# -- 0005: where a Slack post landed becomes a thread reference ----------------------------

ORIGIN = "slack:T1/C1/1700000000.000100"
# (thread_ref, landed_on as 0004 wrote it, landed_on after 0005)
LANDED = [
    (ORIGIN, "slack:C1:1700000000.000200", f"{ORIGIN}:1700000000.000200"),
    (
        ORIGIN,
        "fallback:slack:COPS:1700000009.000001",
        "fallback:slack:T1/COPS/1700000009.000001:1700000009.000001",
    ),
    (  # a GitHub origin: the team comes from Keel's other Slack threads
        "github:acme/shop#7",
        "fallback:slack:COPS:1700000009.000002",
        "fallback:slack:T1/COPS/1700000009.000002:1700000009.000002",
    ),
    (ORIGIN, ORIGIN, ORIGIN),  # a reaction already recorded its thread
    ("github:acme/shop#7", "github:acme/shop#7:55", "github:acme/shop#7:55"),
    ("github:acme/shop#7", "fallback:github:acme/ops#1:56", "fallback:github:acme/ops#1:56"),
    (ORIGIN, None, None),  # not sent yet
]


def _alembic(engine: Engine, verb: str, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(migrate.__file__).with_name("migrations")))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        getattr(command, verb)(config, revision)


def _put_outbox(engine: Engine, rows: list[tuple[str, str | None]]) -> None:
    now = datetime.now(UTC)
    values = [
        {
            "task_id": "t1", "purpose": f"p{n}", "surface": parse_thread(ref).surface,
            "thread_ref": ref, "idempotency_key": f"k{n}", "action": "post", "body": "b",
            "state": "landed" if landed else "pending", "attempts": 1, "landed_on": landed,
            "next_attempt_at": now, "created_at": now,
        }
        for n, (ref, landed) in enumerate(rows)
    ]
    with engine.begin() as connection:
        connection.execute(insert(OutboxRow), values)


def _landed_on(engine: Engine) -> list[str | None]:
    with engine.connect() as connection:
        query = select(OutboxRow.landed_on).order_by(OutboxRow.outbox_id)
        return list(connection.execute(query).scalars())


def test_legacy_slack_landed_on_becomes_a_thread_reference_when_upgraded(db_url: str) -> None:
    engine = make_engine(db_url)
    _alembic(engine, "downgrade", "0004")
    _put_outbox(engine, [(ref, old) for ref, old, _ in LANDED])

    _alembic(engine, "upgrade", "head")
    migrated = _landed_on(engine)
    assert migrated == [new for _, _, new in LANDED]
    # Every one of them reads back through the owner of the form, as the outbox reads it.
    assert all(parse_landed(text) for text in migrated if text)

    _alembic(engine, "downgrade", "0004")
    restored = _landed_on(engine)
    _alembic(engine, "upgrade", "head")
    engine.dispose()
    # Down again, posts get their old form; fallback posts keep the team they were given.
    assert restored[0] == "slack:C1:1700000000.000200"
    assert restored[1:3] == [
        "fallback:slack:COPS:1700000009.000001", "fallback:slack:COPS:1700000009.000002"
    ]
    assert restored[3:] == [old for _, old, _ in LANDED[3:]]


def test_legacy_fallback_post_is_left_as_it_was_when_no_slack_thread_names_a_team(
    db_url: str,
) -> None:
    engine = make_engine(db_url)
    _alembic(engine, "downgrade", "0004")
    _put_outbox(engine, [("github:acme/shop#7", "fallback:slack:COPS:1700000009.000003")])
    _alembic(engine, "upgrade", "head")
    assert _landed_on(engine) == ["fallback:slack:COPS:1700000009.000003"]
    assert is_current(engine)
    engine.dispose()


def _outbox_states(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        query = select(OutboxRow.state).order_by(OutboxRow.outbox_id)
        return list(connection.execute(query).scalars())


def test_a_failed_post_becomes_undelivered_when_upgraded(db_url: str) -> None:
    engine = make_engine(db_url)
    _alembic(engine, "downgrade", "0009_prloop")
    _put_outbox(engine, [(ORIGIN, None), (ORIGIN, ORIGIN)])
    with engine.begin() as connection:
        first = OutboxRow.idempotency_key == "k0"
        connection.execute(update(OutboxRow).where(first).values(state="failed"))
    _alembic(engine, "upgrade", "head")
    assert _outbox_states(engine) == ["undelivered", "landed"]
    _alembic(engine, "downgrade", "0009_prloop")
    assert _outbox_states(engine) == ["failed", "landed"]
    _alembic(engine, "upgrade", "head")
    engine.dispose()
