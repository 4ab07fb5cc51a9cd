"""A database made at any earlier revision upgrades to the head with its data (#41).

For every released revision before the head: a database is made at it, given a row in each
table that revision has (a task with its execution, delivery and status change, a mailbox
message, a transcript item, a tool call, evidence, a Slack post, a signal and its routing
attempt, and, as their revisions come, an installation, an OAuth state, a model call, a held
GitHub delivery, a redelivery claim and a pull request link), then upgraded as Keel upgrades
on start. Every row must still hold what was written, and Keel's store must read the upgraded
database as it reads a head database given the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, column, inspect, select, table
from sqlalchemy.orm import Session

from runtime.execution import FIRST_PHASE, RunState
from runtime.store import executions as runs
from runtime.store import (
    held,
    installations,
    links,
    mailbox,
    migrate,
    owners,
    signals,
    usage,
    views,
)
from runtime.store.engine import make_engine
from runtime.store.models import Base
from runtime.store.records import TextPart
from tests.databases import Databases
from tests.factories import THREAD

SCRIPTS = Path(migrate.__file__).with_name("migrations")
# Every revision but the head, oldest first.
EARLIER = [s.revision for s in ScriptDirectory(str(SCRIPTS)).walk_revisions()][:0:-1]
AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
LATER = AT + timedelta(minutes=5)
SLACK = "slack:T1/C1/1700000000.000100"
PR = "github:acme/shop#7"
SLACK_KEY = installations.InstallationKey("slack", None, "T1", "bot")

# One row per table, as the head writes it; a table or column an older revision lacks is
# left out when the row is written there.
ROWS: dict[str, dict[str, Any]] = {
    "tasks": {
        "id": "t1",
        "root_id": "t1",
        "parent_id": None,
        "child_key": None,
        "depth": 0,
        "agent": "default",
        "status": "running",
        "message": "fix the failing test",
        "origin_thread_ref": SLACK,
        "objective_key": SLACK,
        "repo": "acme/shop",
        "follows_task_id": None,
        "requested_by": "U1",
        "result": None,
        "mailbox_seq": 1,
        "cancel_requested_at": None,
        "cancel_reason": None,
        "cancel_requested_by": None,
        "deadline_at": AT + timedelta(hours=1),
        "created_at": AT,
        "status_changed_at": LATER,
        "finished_at": None,
    },
    "executions": {
        "task_id": "t1",
        "phase": FIRST_PHASE,
        "turn": 2,
        "mailbox_position": 1,
        "state": RunState().to_json(),
        "lease_id": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "version": 7,
        "updated_at": LATER,
    },
    "task_status_changes": {"id": 1, "task_id": "t1", "status": "running", "at": LATER},
    "deliveries": {
        "id": 1,
        "task_id": "t1",
        "token": "tok1",
        "reason": "schedule",
        "available_at": AT,
        "consumed_at": LATER,
        "consumed_by": "worker-1",
        "created_at": AT,
    },
    "mailbox_messages": {
        "id": "m1",
        "task_id": "t1",
        "seq": 1,
        "idempotency_key": "slack:Ev2",
        "parts": [TextPart("it only happens in Safari").to_json()],
        "author": "alice",
        "created_at": LATER,
    },
    "transcript_items": {
        "id": 1,
        "task_id": "t1",
        "item_key": "brief:t1",
        "role": "user",
        "kind": "message",
        "payload": {"text": "fix the failing test"},
        "created_at": AT,
    },
    "tool_calls": {
        "task_id": "t1",
        "call_id": "call1",
        "turn": 1,
        "idx": 0,
        "name": "run_tests",
        "args": {"path": "tests"},
        "effect": "read",
        "dispatch_state": "settled",
        "handle": None,
        "deadline_at": None,
        "outcome": "ok",
        "result": {"output": "3 passed"},
        "dispatched_at": AT,
        "settled_at": LATER,
        "late_reports": 0,
    },
    "evidence": {
        "id": 1,
        "task_id": "t1",
        "root_id": "t1",
        "call_id": "call1",
        "kind": "test_run",
        "ref": "tests",
        "strength": 1,
        "detail": {"passed": 3},
        "created_at": LATER,
    },
    "outbox": {
        "id": 1,
        "task_id": "t1",
        "purpose": "ack",
        "surface": "slack",
        "thread_ref": SLACK,
        "idempotency_key": "ack:t1",
        "action": "post",
        "body": "on it",
        "actions": None,
        "state": "landed",
        "attempts": 1,
        "last_error": None,
        "landed_at": AT,
        "landed_on": f"{SLACK}:1700000000.000300",
        "next_attempt_at": AT,
        "created_at": AT,
    },
    "signals": {
        "id": "s1",
        "provider": "slack",
        "delivery_id": "Ev1",
        "dedupe_key": "slack:T1:C1:1700000000.000100",
        "kind": "mention",
        "thread_ref": SLACK,
        "objective_key": SLACK,
        "actor": {"id": "U1", "name": "alice", "is_bot": False, "is_self": False},
        "text": "@keel fix the failing test",
        "decision": "new_task",
        "reason": None,
        "task_id": "t1",
        "received_at": AT,
        "plan": None,
        "message_ref": str(THREAD),
        "url": "https://acme.slack.com/archives/C1/p1",
    },
    "route_attempts": {
        "id": 1,
        "signal_id": "s1",
        "attempt": 1,
        "target_task_id": "t1",
        "idempotency_key": "route:s1",
        "outcome": "created",
        "created_at": AT,
    },
    "installations": {
        "id": 1,
        "provider": "slack",
        "enterprise_id": "",
        "team_id": "T1",
        "kind": "bot",
        "user_id": "",
        "sealed": "sealed-token",
        "installed_at": AT,
        "created_at": AT,
    },
    "oauth_states": {"state": "st1", "expires_at": AT + timedelta(days=1), "created_at": AT},
    "model_calls": {
        "id": 1,
        "task_id": "t1",
        "root_id": "t1",
        "call_key": "turn:0",
        "purpose": "turn",
        "model": "gpt-4o-mini",
        "prompt_tokens": 12_000,
        "completion_tokens": 400,
        "cached_tokens": 2_000,
        "cost_usd": 0.0031,
        "seconds": 1.5,
        "created_at": AT,
    },
    "github_inbox": {
        "delivery_id": "gh1",
        "event": "issue_comment",
        "payload": {"action": "created"},
        "received_at": AT,
        "attempts": 1,
        "next_at": AT,
        "last_error": "timeout",
    },
    "github_redeliveries": {
        "guid": "guid1",
        "hook_id": 99,
        "delivered_at": AT,
        "requested_at": LATER,
    },
    "pull_links": {
        "repo": "acme/shop",
        "number": 7,
        "objective_key": PR,
        "task_id": "t1",
        "head_ref": "keel/fix",
        "head_sha": "a" * 40,
        "created_at": AT,
        "updated_at": LATER,
    },
    "machines": {"machine_id": "host-a:1234abcd", "lease_expires_at": LATER, "seen_at": AT},
    "workspace_owners": {
        "root_id": "t1",
        "machine_id": "host-a:1234abcd",
        "since": AT,
        "snapshot_sha": "b" * 40,
        "snapshot_tree": "c" * 40,
        "snapshot_turn": 2,
        "snapshot_at": LATER,
        "taken_from": None,
    },
}
assert ROWS.keys() == Base.metadata.tables.keys(), "a table without a representative row"

# What Keel's store reads of them: each reader names the tables it reads.
READERS: dict[str, Callable[[Session], object]] = {
    "tasks": lambda s: views.task_detail(s, "t1"),
    "executions": lambda s: runs.load_run(s, "t1"),
    "mailbox_messages": lambda s: mailbox.messages_after(s, "t1", 0),
    "signals": lambda s: signals.get_signal(s, "s1"),
    "route_attempts": lambda s: signals.attempts_for(s, "s1"),
    "installations": lambda s: installations.find(s, SLACK_KEY),
    "model_calls": lambda s: usage.calls_of(s, "t1"),
    "github_inbox": lambda s: held.due(s, LATER, 10),
    "pull_links": lambda s: links.pull_link(s, "acme/shop", 7),
    "workspace_owners": lambda s: owners.owner_of(s, "t1"),
}


def _alembic_upgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _write(engine: Engine) -> dict[str, dict[str, Any]]:
    """Write the part of ROWS the database's schema has; returns what was written."""
    schema = inspect(engine)
    written: dict[str, dict[str, Any]] = {}
    for name in schema.get_table_names():
        if name in ROWS:
            present = {c["name"] for c in schema.get_columns(name)}
            written[name] = {k: v for k, v in ROWS[name].items() if k in present}
    with engine.begin() as connection:
        for name, row in written.items():
            connection.execute(_typed(name, row).insert(), [row])
    return written


def _typed(name: str, row: dict[str, Any]) -> Any:
    """A table of just these columns, with the head's types (times in UTC, JSON)."""
    model = Base.metadata.tables[name]
    return table(name, *(column(key, model.c[key].type) for key in row))


def _stored(engine: Engine, written: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    with engine.connect() as connection:
        return {
            name: dict(connection.execute(select(_typed(name, row))).one()._mapping)
            for name, row in written.items()
        }


def _reads(engine: Engine, tables: set[str]) -> dict[str, object]:
    with Session(engine) as session:
        return {name: read(session) for name, read in READERS.items() if name in tables}


@pytest.mark.parametrize("revision", EARLIER)
def test_a_database_made_at_an_earlier_revision_upgrades_with_its_data(
    databases: Databases, revision: str
) -> None:
    old = make_engine(databases.empty())
    _alembic_upgrade(old, revision)
    written = _write(old)

    migrate.upgrade(old)  # as keel serve, keel worker and keel db upgrade do

    assert migrate.current_revision(old) == migrate.head_from_files()
    with old.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    assert _stored(old, written) == written
    # The store reads it as it reads a head database given the same rows.
    head = make_engine(databases.migrated())
    with head.begin() as connection:
        for name, row in written.items():
            connection.execute(_typed(name, row).insert(), [row])
    upgraded, expected = _reads(old, set(written)), _reads(head, set(written))
    old.dispose()
    head.dispose()
    assert upgraded == expected
    assert all(value for value in upgraded.values()), upgraded  # each found its row


def test_every_earlier_revision_is_tried() -> None:
    """Against the record of released migrations, not the chain EARLIER is read from: a
    released revision the chain stopped naming would be missed here."""
    lines = (SCRIPTS / "released.txt").read_text().splitlines()
    released = [line.split()[0] for line in lines if line and not line.startswith("#")]
    assert set(EARLIER) == set(released) - {migrate.head_from_files()}
    assert EARLIER[0] == "0001"
