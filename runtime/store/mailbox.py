"""A task's mailbox: the messages appended to it, numbered in arrival order, read after a
position.

Appending takes the task's row (the caller locked it): the task holds the last sequence
number, so two appends to one task order on that row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from runtime.ids import MessageId, TaskId, new_message_id
from runtime.store.models import MailboxMessageRow, TaskRow
from runtime.store.records import MailboxMessage


def _to_message(row: MailboxMessageRow) -> MailboxMessage:
    return MailboxMessage(
        message_id=MessageId(row.message_id),
        task_id=TaskId(row.task_id),
        seq=row.seq,
        idempotency_key=row.idempotency_key,
        parts=tuple(row.parts),
        author=row.author,
        created_at=row.created_at,
    )


def find_message(session: Session, task_id: str, key: str) -> MailboxMessage | None:
    query = select(MailboxMessageRow).where(
        MailboxMessageRow.task_id == task_id, MailboxMessageRow.idempotency_key == key
    )
    row = session.scalars(query).first()
    return _to_message(row) if row is not None else None


def append_message(
    session: Session,
    task_id: str,
    key: str,
    parts: Sequence[dict[str, Any]],
    author: str | None,
    now: datetime,
) -> MailboxMessage:
    """The message, numbered after the task's last one. Raises ``LookupError`` if the task
    is gone."""
    task = session.get(TaskRow, task_id)
    if task is None:
        raise LookupError(f"task {task_id} does not exist")
    task.mailbox_seq += 1
    row = MailboxMessageRow(
        message_id=new_message_id(),
        task_id=task.task_id,
        seq=task.mailbox_seq,
        idempotency_key=key,
        parts=list(parts),
        author=author,
        created_at=now,
    )
    session.add(row)
    return _to_message(row)


def messages_after(session: Session, task_id: str, after: int) -> list[MailboxMessage]:
    query = (
        select(MailboxMessageRow)
        .where(MailboxMessageRow.task_id == task_id, MailboxMessageRow.seq > after)
        .order_by(MailboxMessageRow.seq)
    )
    return [_to_message(r) for r in session.scalars(query)]
