"""What others change on a task while a worker holds its lease, read back in one statement.

A tick reads its task once; after each transition it needs only the columns others may have
written since (a message appended, a stop asked, a child's result settling the parent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.orm import Session

from runtime.errors import StaleWrite
from runtime.store import executions
from runtime.store.models import TaskRow
from runtime.store.prepared import Prepared
from runtime.store.records import Task, TaskStatus

_TASKS = cast(Table, TaskRow.__table__)
# What others may change on a task while a worker holds its lease.
_CHANGES = (
    _TASKS.c.status,
    _TASKS.c.result,
    _TASKS.c.mailbox_seq,
    _TASKS.c.cancel_requested_at,
    _TASKS.c.status_changed_at,
    _TASKS.c.finished_at,
)
_TASK_CHANGES = Prepared(select(*_CHANGES).where(_TASKS.c.id == bindparam("b_task_id")))
# The transition's fenced UPDATE, answering with the task's changes (PostgreSQL; SQLite's
# RETURNING cannot name another table).
_ADVANCE_READING_CHANGES = Prepared(
    executions.ADVANCE.where(executions.ADVANCE.table.c.task_id == _TASKS.c.id).returning(*_CHANGES)
)


def refresh_task(session: Session, task: Task) -> Task | None:
    """``task`` with what others may have changed since it was read: status, result, mailbox
    sequence and stop. None if the task is gone."""
    session.flush()
    row = _TASK_CHANGES.first(session, {"b_task_id": task.task_id})
    return None if row is None else _changed(task, row)


def advance_and_refresh(
    session: Session, run: executions.Run, lease_id: str, task: Task, advance: executions.Advance
) -> Task | None:
    """``executions.commit_transition`` then ``refresh_task``: for a lease holder that ticks
    on. On PostgreSQL, when no ORM change waits to be flushed first, one statement does both
    (a round trip and a statement's CPU less per phase). Raises ``StaleWrite`` as the
    transition does."""
    pending = session.new or session.dirty or session.deleted
    if pending or session.get_bind().dialect.name != "postgresql":
        executions.commit_transition(session, run, lease_id, advance)
        return refresh_task(session, task)
    params = executions.transition_parameters(run, lease_id, advance)
    row = _ADVANCE_READING_CHANGES.first(session, params)
    if row is None:  # the fence held (a task's execution goes only with its task)
        raise StaleWrite(f"execution {run.task_id} moved past version {run.version}")
    return _changed(task, row)


def _changed(task: Task, row: Sequence[Any]) -> Task:
    return replace(
        task,
        status=TaskStatus(row[0]),
        result=row[1],
        mailbox_seq=row[2],
        cancel_requested_at=row[3],
        status_changed_at=row[4],
        finished_at=row[5],
    )
