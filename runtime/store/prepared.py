"""Statements compiled once per dialect and run as driver SQL: the executor's every-tick path.

SQLAlchemy's per-execution work (the statement's cache key, the compiled-cache lookup, an
execution context, type processing through generic paths) costs several times the statement
itself for the few-row statements a tick runs. A ``Prepared`` keeps each dialect's SQL text
and the parameter and column processors that SQLAlchemy's types give for it; a run is then:
process the parameters, execute on the driver's cursor in the session's transaction, process
the rows. The statement is still written, and typed, as SQLAlchemy Core.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import UpdateBase

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Form:
    """One dialect's compiled statement."""

    sql: str
    names: tuple[str, ...]  # parameter names in the order the SQL takes them
    positional: bool
    literals: dict[str, Any]  # values written into the statement itself
    binds: Mapping[str, Processor]
    columns: tuple[Processor, ...]
    _multi: dict[int, str] = field(default_factory=dict, compare=False)  # by row count

    def parameters(self, given: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        values = [self._value(name, given) for name in self.names]
        return tuple(values) if self.positional else dict(zip(self.names, values, strict=True))

    def _value(self, name: str, given: Mapping[str, Any]) -> Any:
        value = given[name] if name in given else self.literals[name]
        process = self.binds[name]
        return value if process is None or value is None else process(value)

    def multi_row(self, count: int) -> str | None:
        """This insert with ``count`` ``VALUES`` tuples, parameter ``name`` of tuple ``n``
        renamed ``name__n``; None if the statement is not a single-row ``INSERT … VALUES``
        in the named (``%(name)s``) style."""
        if count not in self._multi:
            self._multi[count] = _multi_row(self.sql, count)
        return self._multi[count] or None

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            value if process is None or value is None else process(value)
            for process, value in zip(self.columns, raw, strict=True)
        )


Statement = Select[Any] | UpdateBase


class Prepared:
    """``statement``, or ``per_dialect(name)`` where the construct differs by dialect (an
    insert that ignores conflicts)."""

    def __init__(
        self,
        statement: Statement | None = None,
        *,
        per_dialect: Callable[[str], Statement] | None = None,
    ) -> None:
        if per_dialect is None:
            if statement is None:
                raise ValueError("give a statement or a per-dialect factory")
            fixed = statement
            per_dialect = lambda _name: fixed  # noqa: E731
        self._make = per_dialect
        self._forms: dict[str, _Form] = {}

    def execute(self, session: Session, params: Mapping[str, Any]) -> int:
        """Run a DML statement; the number of rows it matched."""
        form = self._form(session)
        matched: int = _run(session, form.sql, form.parameters(params), many=False).rowcount
        return matched

    def execute_many(self, session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run a DML statement once per row of parameters.

        On PostgreSQL the driver's ``executemany`` is a pipeline with a sync point per row,
        which costs more CPU and time than the rows themselves for the few rows a phase
        writes; an insert goes as one statement with a ``VALUES`` tuple per row instead
        (rows are inserted, and serial ids drawn, in the order given), anything else row by
        row. SQLite's ``executemany`` is a C loop over one prepared statement.
        """
        if not rows:
            return
        form = self._form(session)
        if form.positional or len(rows) == 1:  # SQLite (qmark), or nothing to batch
            many = len(rows) > 1
            given = [form.parameters(row) for row in rows] if many else form.parameters(rows[0])
            _run(session, form.sql, given, many=many)
            return
        multi = form.multi_row(len(rows))
        if multi is None:
            for row in rows:
                _run(session, form.sql, form.parameters(row), many=False)
            return
        values: dict[str, Any] = {}
        for n, row in enumerate(rows):
            for name, value in cast(dict[str, Any], form.parameters(row)).items():
                values[f"{name}__{n}"] = value
        _run(session, multi, values, many=False)

    def rows(self, session: Session, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        form = self._form(session)
        found = _run(session, form.sql, form.parameters(params), many=False).fetchall()
        return [form.row(raw) for raw in found]

    def first(self, session: Session, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        found = self.rows(session, params)
        return found[0] if found else None

    def _form(self, session: Session) -> _Form:
        dialect = session.get_bind().dialect
        form = self._forms.get(dialect.name)
        if form is None:
            form = self._forms[dialect.name] = _compile(self._make(dialect.name), dialect)
        return form


def _run(session: Session, sql: str, parameters: Any, *, many: bool) -> Any:
    """Execute in the session's transaction; a cursor (or cursor result) to read.

    The statement goes to the driver's cursor, a driver error translated into SQLAlchemy's
    (so an OperationalError still means the same to ``Database``), unless something listens
    to cursor executions on this connection (PostgreSQL's NUL replacement, a test that
    inspects statements): then it goes through ``exec_driver_sql``, which tells them.
    """
    connection = session.connection()
    events = connection.dispatch
    if events.before_cursor_execute or events.after_cursor_execute:
        return connection.exec_driver_sql(sql, parameters)
    driver = connection.connection.driver_connection
    assert driver is not None
    dialect = connection.dialect
    errors = dialect.loaded_dbapi.Error
    try:
        cursor = driver.cursor()
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
    except errors as e:
        raise DBAPIError.instance(sql, parameters, e, errors, dialect=dialect) from e
    return cursor


def _compile(statement: Statement, dialect: Dialect) -> _Form:
    compiled = statement.compile(dialect=dialect)
    positional = bool(compiled.positional)
    names = tuple(compiled.positiontup or ()) if positional else tuple(compiled.binds)
    binds = {
        name: bind.type.dialect_impl(dialect).bind_processor(dialect)
        for name, bind in compiled.binds.items()
    }
    literals = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
    # What a SELECT selects, or what an INSERT/UPDATE/DELETE returns.
    selected = statement.selected_columns if isinstance(statement, Select) else (
        statement.exported_columns
    )
    columns = tuple(
        column.type.dialect_impl(dialect).result_processor(dialect, None) for column in selected
    )
    return _Form(compiled.string, names, positional, literals, binds, columns)


_NAMED = re.compile(r"%\((\w+)\)s")


def _multi_row(sql: str, count: int) -> str:
    """``sql``'s ``VALUES (…)`` tuple repeated ``count`` times with renamed parameters, or ""
    if ``sql`` is not an insert of one such tuple."""
    if not sql.startswith("INSERT ") or " VALUES (" not in sql:
        return ""
    head, _, rest = sql.partition(" VALUES ")
    depths = itertools.accumulate({"(": 1, ")": -1}.get(char, 0) for char in rest)
    end = next((n for n, depth in enumerate(depths) if depth == 0), None)
    if end is None:
        return ""
    one, tail = rest[: end + 1], rest[end + 1 :]
    if _NAMED.search(head) or _NAMED.search(tail) or tail.lstrip().startswith(","):
        return ""
    template = _NAMED.sub(r"%(\1__{n})s", one.replace("{", "{{").replace("}", "}}"))
    tuples = (template.format(n=n) for n in range(count))
    return f"{head} VALUES {', '.join(tuples)}{tail}"
