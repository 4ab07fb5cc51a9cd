"""Schema migrations: ``keel db upgrade`` and the automatic upgrade on start.

Alembic (and Mako with it) is imported only when there is something to migrate: ``serve`` and
``worker`` check at start-up, and on a current database that check is one query against the
head read from the revision files, so the processes do not carry Alembic's ~11 MB.

A database carries the id of the last revision it ran. Released revisions are never renamed
(tests/unit/test_released_migrations.py), but some ids were, before that rule: ``RETIRED``
says where each such database rejoins the chain. Any other id this code does not know is
refused in one sentence (``UnknownSchema``) before anything is changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from runtime.errors import UnknownSchema

if TYPE_CHECKING:
    from alembic.config import Config

_SCRIPTS = Path(__file__).with_name("migrations")
_REVISION = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]\s*$", re.M)
_DOWN = re.compile(r"^down_revision(?:\s*:[^=]+)?\s*=\s*(?:None|['\"]([^'\"]+)['\"])\s*$", re.M)


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


@dataclass(frozen=True, slots=True)
class Retired:
    """A revision id that databases carry but no file has any more: such a database holds
    ``rejoin``'s schema plus the work of ``became`` (the revision that does it now)."""

    revision: str
    rejoin: str
    became: str
    # Indexes of ``became`` that an earlier form of the retired revision lacked, as
    # (name, table, columns): created where missing.
    late_indexes: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


RETIRED = {
    r.revision: r
    for r in (
        # prloop's table of linked pull requests (1107046, ceaec48) was 0008_prloop after
        # 0007_slack; when 0008_context and 0008_github came first it was renamed 0009_prloop
        # (06e75c1). Its first form lacked ix_signals_objective_kind (added in ceaec48).
        Retired(
            "0008_prloop",
            rejoin="0007_slack",
            became="0009_prloop",
            late_indexes=(("ix_signals_objective_kind", "signals", ("objective_key", "kind")),),
        ),
    )
}


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision; a no-op when already there.

    Raises ``UnknownSchema``, having changed nothing, when the database is at a revision
    this code neither has nor lists in ``RETIRED``.
    """
    head = head_from_files()
    if head is not None and current_revision(engine) == head:
        return
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        stamped = _stamped(connection)
        if stamped in RETIRED:
            _rejoin(config, connection, RETIRED[stamped])
        elif stamped is not None:
            _check_known(config, stamped)
        command.upgrade(config, "head")
        _check_complete(connection, stamped)


def _stamped(connection: Connection) -> str | None:
    if not inspect(connection).has_table("alembic_version"):
        return None
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return str(rows[0]) if len(rows) == 1 else None


def _check_known(config: Config, stamped: str) -> None:
    from alembic.script import ScriptDirectory

    known = [s.revision for s in ScriptDirectory.from_config(config).walk_revisions()]
    if stamped not in known:
        raise UnknownSchema(
            f"the database is at schema revision {stamped!r}, which this Keel does not know "
            f"(its revisions run {known[-1]} to {known[0]}, the head): a newer Keel or an "
            "unreleased branch wrote it. Run that Keel, or restore a backup taken before "
            "it ran; nothing was changed"
        )


def _check_complete(connection: Connection, stamped: str | None) -> None:
    """Every table of the models exists after an upgrade. A database an unreleased branch
    stamped with a released id (``0008_github`` before ``0008_context`` came ahead of it)
    skipped a revision's work: it is refused, and the upgrade's transaction rolls back
    wherever the database can undo schema changes (PostgreSQL; SQLite's own DDL too)."""
    from runtime.store.models import Base

    missing = sorted(set(Base.metadata.tables) - set(inspect(connection).get_table_names()))
    if missing:
        raise UnknownSchema(
            f"the database was at schema revision {stamped!r} but lacks the tables "
            f"{', '.join(missing)} that revision's chain creates: an unreleased branch wrote "
            "it under a released id. Restore a backup taken before that branch ran"
        )


def _rejoin(config: Config, connection: Connection, retired: Retired) -> None:
    """Run what the retired revision's database lacks up to where ``became`` stands, make
    sure ``became``'s work is all there, and stamp it: the usual upgrade goes on from it."""
    from alembic import command
    from alembic.script import ScriptDirectory

    before = ScriptDirectory.from_config(config).get_revision(retired.became).down_revision
    _stamp(connection, retired.rejoin)
    command.upgrade(config, str(before))
    for name, table, columns in retired.late_indexes:
        if name not in {i["name"] for i in inspect(connection).get_indexes(table)}:
            connection.exec_driver_sql(f"CREATE INDEX {name} ON {table} ({', '.join(columns)})")
    _stamp(connection, retired.became)


def _stamp(connection: Connection, revision: str) -> None:
    connection.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


def head_from_files() -> str | None:
    """The one revision no other revision names as its parent, read from the files as text;
    None when a file says more than this reads (a merge, a tuple): then Alembic decides."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (_SCRIPTS / "versions").glob("*.py"):
        source = path.read_text()
        found = _REVISION.findall(source)
        down = _DOWN.search(source)
        if not found and down is None:
            continue  # not a revision (``__init__.py``)
        if len(found) != 1 or down is None:
            return None
        revisions.add(found[0])
        if down.group(1):
            parents.add(down.group(1))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def current_revision(engine: Engine) -> str | None:
    """The applied revision, or None (no schema yet, or the table is unreadable)."""
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    except DBAPIError:
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def is_current(engine: Engine) -> bool:
    head = head_from_files()
    if head is not None:
        return current_revision(engine) == head
    from alembic.runtime.migration import MigrationContext

    head = head_revision()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current == head


def revision(engine: Engine, message: str) -> None:
    """Developer aid: autogenerate a new revision from the models."""
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.revision(config, message=message, autogenerate=True)
