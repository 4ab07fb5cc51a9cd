"""Task lifecycle SQL: tasks, status changes and deliveries (the mailbox is ``mailbox.py``).

Every function takes an open Session inside a transaction; the scheduler composes them.
Row locks (``FOR UPDATE``) are no-ops on SQLite, where ``BEGIN IMMEDIATE`` already
serialises writers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.orm import Session

from runtime.ids import TaskId
from runtime.store import deliveries, executions
from runtime.store.models import (
    TaskRow,
    TaskStatusChangeRow,
)
from runtime.store.prepared import Prepared
from runtime.store.records import (
    TERMINAL,
    StatusChange,
    StopRequest,
    Task,
    TaskResult,
    TaskSpec,
    TaskStatus,
)
from runtime.threads import text_of, thread_of

_TERMINAL_NAMES = [s.value for s in TERMINAL]


def to_task(row: TaskRow) -> Task:
    return Task(
        task_id=TaskId(row.task_id),
        root_id=TaskId(row.root_id),
        parent_id=TaskId(row.parent_id) if row.parent_id else None,
        child_key=row.child_key,
        depth=row.depth,
        agent=row.agent,
        status=TaskStatus(row.status),
        message=row.message,
        origin_thread_ref=thread_of(row.origin_thread_ref),
        objective_key=row.objective_key,
        repo=row.repo,
        follows_task_id=TaskId(row.follows_task_id) if row.follows_task_id else None,
        requested_by=row.requested_by,
        result=row.result,
        mailbox_seq=row.mailbox_seq,
        cancel_requested_at=row.cancel_requested_at,
        deadline_at=row.deadline_at,
        created_at=row.created_at,
        status_changed_at=row.status_changed_at,
        finished_at=row.finished_at,
    )


_TASKS = cast(Table, TaskRow.__table__)
# Task's fields in order, each with its column (``task_id`` is the column ``id``).
_TASK_FIELDS = (
    "task_id", "root_id", "parent_id", "child_key", "depth", "agent", "status", "message",
    "origin_thread_ref", "objective_key", "repo", "follows_task_id", "requested_by", "result",
    "mailbox_seq", "cancel_requested_at", "deadline_at", "created_at", "status_changed_at",
    "finished_at",
)
_TASK_SELECT = select(*(_TASKS.c["id" if f == "task_id" else f] for f in _TASK_FIELDS)).where(
    _TASKS.c.id == bindparam("b_task_id")
)
_STATUS = _TASK_FIELDS.index("status")
_ORIGIN = _TASK_FIELDS.index("origin_thread_ref")
_READ_TASK = Prepared(_TASK_SELECT)
_LOCK_TASK = Prepared(_TASK_SELECT.with_for_update())


def read_task(session: Session, task_id: str, *, lock: bool = False) -> Task | None:
    """The task as a record, read without the ORM: the executor reads it on every tick.

    Unflushed ORM changes of this transaction are flushed first, so it sees what
    ``get_task`` would. ``lock`` takes the row lock ``lock_task`` takes.
    """
    session.flush()
    row = (_LOCK_TASK if lock else _READ_TASK).first(session, {"b_task_id": task_id})
    return _task_of(row) if row is not None else None


def _task_of(row: Sequence[Any]) -> Task:
    values = list(row)
    values[_STATUS] = TaskStatus(values[_STATUS])
    values[_ORIGIN] = thread_of(values[_ORIGIN])
    return Task(*values)


_ROOTS_OF = select(*(_TASKS.c["id" if f == "task_id" else f] for f in _TASK_FIELDS)).where(
    _TASKS.c.objective_key == bindparam("b_objective"), _TASKS.c.parent_id.is_(None)
)
_NEWEST_FIRST = (_TASKS.c.created_at.desc(), _TASKS.c.id.desc())
_NEWEST_ROOT = Prepared(_ROOTS_OF.order_by(*_NEWEST_FIRST).limit(1))
_NEWEST_LIVE_ROOT = Prepared(
    # One comparison per status: an IN list would be expanded per execution.
    _ROOTS_OF.where(*(_TASKS.c.status != name for name in _TERMINAL_NAMES))
    .order_by(*_NEWEST_FIRST)
    .limit(1)
)


_ROOT_CREATED_UNDER = Prepared(
    select(*(_TASKS.c["id" if f == "task_id" else f] for f in _TASK_FIELDS))
    .where(_TASKS.c.parent_id.is_(None), _TASKS.c.child_key == bindparam("b_key"))
    .order_by(_TASKS.c.created_at)
    .limit(1)
)


def root_created_under(session: Session, creation_key: str) -> Task | None:
    """The root task scheduled under ``creation_key`` (its child_key), if one was."""
    session.flush()
    row = _ROOT_CREATED_UNDER.first(session, {"b_key": creation_key})
    return _task_of(row) if row is not None else None


def newest_roots(session: Session, objective_key: str) -> tuple[Task | None, Task | None]:
    """(the newest live root task, the newest root task) of an objective, without the ORM:
    every webhook reads them. One statement when the newest is live or there is none."""
    session.flush()
    found = _NEWEST_ROOT.first(session, {"b_objective": objective_key})
    newest = _task_of(found) if found is not None else None
    if newest is None or not newest.status.is_terminal:
        return newest, newest
    live = _NEWEST_LIVE_ROOT.first(session, {"b_objective": objective_key})
    return (_task_of(live) if live is not None else None), newest


def stop_recorded(session: Session, task: Task) -> bool:
    """A stop is recorded on the task or an ancestor, or one of them is already terminal."""
    current: Task | None = task
    while current is not None:
        if current.cancel_requested_at is not None or current.status.is_terminal:
            return True
        current = read_task(session, current.parent_id) if current.parent_id else None
    return False


def lock_task(session: Session, task_id: str) -> Task | None:
    """The task, its row locked for the rest of the transaction."""
    row = session.scalars(
        select(TaskRow).where(TaskRow.task_id == task_id).with_for_update()
    ).first()
    return to_task(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class Tree:
    """Which tree a task is in, and the repository its workspace is a checkout of."""

    root_id: str
    repo: str | None


_LOCK_ROW = Prepared(
    select(_TASKS.c.root_id, _TASKS.c.repo)
    .where(_TASKS.c.id == bindparam("b_task_id"))
    .with_for_update()
)


def lock_task_row(session: Session, task_id: str) -> bool:
    """Lock the task's row without loading it; False if there is none.

    A transaction that writes both a task and its execution locks the task first: the
    mailbox, stop and child-result paths do (``lock_task``, then the execution), so one that
    took the execution first could wait on them while they wait on it."""
    return lock_tree(session, task_id) is not None


def lock_tree(session: Session, task_id: str) -> Tree | None:
    """``lock_task_row``, saying which tree the task is in (None if there is no task)."""
    row = _LOCK_ROW.first(session, {"b_task_id": task_id})
    return None if row is None else Tree(str(row[0]), row[1])


def get_task(session: Session, task_id: str) -> Task | None:
    row = session.get(TaskRow, task_id)
    return to_task(row) if row is not None else None


def stop_request(session: Session, task_id: str) -> StopRequest | None:
    """The first stop asked of the task, if one was."""
    row = session.get(TaskRow, task_id)
    if row is None or row.cancel_requested_at is None:
        return None
    return StopRequest(row.cancel_requested_at, row.cancel_reason, row.cancel_requested_by)


def find_child(session: Session, parent_id: str, child_key: str) -> Task | None:
    query = select(TaskRow).where(TaskRow.parent_id == parent_id, TaskRow.child_key == child_key)
    row = session.scalars(query).first()
    return to_task(row) if row is not None else None


def tree_size(session: Session, root_id: str, *, since: datetime | None = None) -> int:
    """How many tasks a tree holds, its root included, whatever their status; with
    ``since``, the root and the tasks created from then on."""
    query = select(func.count()).select_from(TaskRow).where(TaskRow.root_id == root_id)
    if since is not None:
        query = query.where((TaskRow.created_at >= since) | (TaskRow.task_id == root_id))
    return int(session.scalar(query) or 0)


_INSERT_TASK = Prepared(
    _TASKS.insert().values(
        {
            _TASKS.c["id" if f == "task_id" else f]: bindparam(f"b_{f}")
            for f in _TASK_FIELDS
            if f not in ("result", "cancel_requested_at", "finished_at")
        }
    )
)
_INSERT_STATUS_CHANGE = Prepared(
    cast(Table, TaskStatusChangeRow.__table__).insert().values(
        task_id=bindparam("b_task_id"), status=bindparam("b_status"), at=bindparam("b_now")
    )
)
def insert_task(
    session: Session, task_id: TaskId, spec: TaskSpec, parent: Task | None, now: datetime
) -> Task:
    """The task, its execution, its first status and its first delivery, as four Core
    inserts (no ORM unit of work: every webhook that starts a task runs this)."""
    available_at = spec.available_at or now
    status = TaskStatus.queued if available_at <= now else TaskStatus.scheduled
    task = Task(
        task_id=task_id,
        root_id=parent.root_id if parent else task_id,
        parent_id=parent.task_id if parent else None,
        child_key=spec.child_key,
        depth=parent.depth + 1 if parent else 0,
        agent=spec.agent,
        status=status,
        message=spec.message,
        origin_thread_ref=spec.origin_thread_ref,
        objective_key=spec.objective_key,
        repo=spec.repo,
        follows_task_id=spec.follows_task_id,
        requested_by=spec.requested_by,
        result=None,
        mailbox_seq=0,
        cancel_requested_at=None,
        deadline_at=spec.deadline_at,
        created_at=now,
        status_changed_at=now,
        finished_at=None,
    )
    session.flush()  # ORM work of this transaction goes first, in the order it was made
    values = {f"b_{f}": getattr(task, f) for f in _TASK_FIELDS}
    values["b_status"] = status.value
    values["b_origin_thread_ref"] = text_of(spec.origin_thread_ref)
    _INSERT_TASK.execute(session, values)
    executions.add_execution(session, task_id, now)
    _INSERT_STATUS_CHANGE.execute(
        session, {"b_task_id": task_id, "b_status": status.value, "b_now": now}
    )
    deliveries.add_delivery(session, task_id, "schedule", available_at, now)
    return task


_START_RUNNING = Prepared(
    update(_TASKS)
    .where(
        _TASKS.c.id == bindparam("b_task_id"),
        # One comparison per status: an IN list would be expanded per execution.
        *(_TASKS.c.status != name for name in [*_TERMINAL_NAMES, TaskStatus.running.value]),
    )
    .values(status=TaskStatus.running.value, status_changed_at=bindparam("b_now"))
    .returning(*_TASK_SELECT.selected_columns)
)


def start_running(session: Session, task_id: str, now: datetime) -> Task | None:
    """The task as a worker that claimed it sees it: ``running`` (the change recorded as
    ``set_status`` records it) unless it is running or finished already. Locks the row."""
    row = _START_RUNNING.first(session, {"b_task_id": task_id, "b_now": now})
    if row is None:
        return read_task(session, task_id, lock=True)
    params = {"b_task_id": task_id, "b_status": TaskStatus.running.value, "b_now": now}
    _INSERT_STATUS_CHANGE.execute(session, params)
    return _task_of(row)


def _row(session: Session, task_id: str) -> TaskRow:
    """The task's row for a write; the caller locked or read it in this transaction, so the
    session usually holds it already."""
    row = session.get(TaskRow, task_id)
    if row is None:
        raise LookupError(f"task {task_id} does not exist")
    return row


def set_status(session: Session, task_id: str, status: TaskStatus, now: datetime) -> Task:
    """The only place a status is written. Terminal states never change. The task as it
    is now."""
    row = _row(session, task_id)
    if TaskStatus(row.status).is_terminal or row.status == status.value:
        return to_task(row)
    row.status = status.value
    row.status_changed_at = now
    if status.is_terminal:
        row.finished_at = now
    session.add(TaskStatusChangeRow(task_id=row.task_id, status=status.value, at=now))
    return to_task(row)


def settle(session: Session, task_id: str, result: TaskResult, now: datetime) -> Task:
    """A terminal status and the result stored with it; the task as it is now."""
    set_status(session, task_id, result.status, now)
    row = _row(session, task_id)
    row.result = {"status": result.status.value, "summary": result.summary, **result.detail}
    return to_task(row)


def record_cancel(
    session: Session, task_id: str, now: datetime, reason: str, requested_by: str | None
) -> None:
    """Record the first stop asked of a task; a later one changes nothing."""
    row = _row(session, task_id)
    if row.cancel_requested_at is None:
        row.cancel_requested_at = now
        row.cancel_reason = reason
        row.cancel_requested_by = requested_by


def status_history(session: Session, task_id: str) -> list[StatusChange]:
    rows = session.scalars(
        select(TaskStatusChangeRow)
        .where(TaskStatusChangeRow.task_id == task_id)
        .order_by(TaskStatusChangeRow.change_id)
    )
    return [StatusChange(TaskStatus(r.status), r.at) for r in rows]


def overdue_tasks(session: Session, now: datetime, limit: int) -> list[Task]:
    query = (
        select(TaskRow)
        .where(TaskRow.deadline_at < now, TaskRow.status.not_in(_TERMINAL_NAMES))
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [to_task(row) for row in session.scalars(query)]


def active_descendants(session: Session, task: Task) -> list[Task]:
    """Non-terminal tasks below ``task`` in its tree (one indexed query on root_id)."""
    query = select(TaskRow).where(
        TaskRow.root_id == task.root_id, TaskRow.status.not_in(_TERMINAL_NAMES)
    )
    by_parent: dict[str, list[Task]] = {}
    for row in session.scalars(query):
        by_parent.setdefault(row.parent_id or "", []).append(to_task(row))
    found: list[Task] = []
    frontier = [task.task_id]
    while frontier:
        children = [c for p in frontier for c in by_parent.get(p, [])]
        found.extend(children)
        frontier = [c.task_id for c in children]
    return found


def latest_by_objective(session: Session, objective_key: str) -> Task | None:
    query = (
        select(TaskRow)
        .where(TaskRow.objective_key == objective_key, TaskRow.parent_id.is_(None))
        .order_by(TaskRow.created_at.desc())
        .limit(1)
    )
    row = session.scalars(query).first()
    return to_task(row) if row is not None else None


def live_tasks_of_tree(session: Session, root_id: str) -> list[str]:
    """The ids of the tree's tasks that have not ended (one indexed query on root_id)."""
    query = select(TaskRow.task_id).where(
        TaskRow.root_id == root_id, TaskRow.status.not_in(_TERMINAL_NAMES)
    )
    return [str(task_id) for task_id in session.scalars(query)]
