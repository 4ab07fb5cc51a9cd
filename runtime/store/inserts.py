"""The one insert-once statement of the store: ``INSERT … ON CONFLICT DO NOTHING``.

Uniqueness lives in constraints, so "insert unless it exists" is a single statement on
either database, never a check-then-insert. SQLite and PostgreSQL spell it with different
SQLAlchemy constructs; ``insert_ignoring`` builds the right one for the session's dialect,
once, and runs it on the driver path (``Prepared``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, bindparam
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from runtime.store.prepared import Prepared


def insert_ignoring(
    table: Table, columns: Sequence[str], keys: Sequence[str] | None = None
) -> Prepared:
    """An insert of ``columns`` (parameters ``v_<column>``) that leaves the table as it is when
    the row would break a unique constraint: the one on ``keys``, or, without ``keys``, any.

    ``execute`` answers 1 when the row went in and 0 when it was already there.
    """

    def make(dialect: str) -> Any:
        maker = pg_insert if dialect == "postgresql" else sqlite_insert
        values = {c: bindparam(f"v_{c}", type_=table.c[c].type) for c in columns}
        statement = maker(table).values(values)
        if keys is None:
            return statement.on_conflict_do_nothing()
        return statement.on_conflict_do_nothing(index_elements=list(keys))

    return Prepared(per_dialect=make)


def parameters(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` by column, as the parameters an ``insert_ignoring`` statement takes."""
    return {f"v_{column}": value for column, value in values.items()}
