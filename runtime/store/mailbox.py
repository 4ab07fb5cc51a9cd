"""A task's mailbox: the messages appended to it, numbered in arrival order, read after a
position.

Appending takes the task's row (the caller locked it): the task holds the last sequence
number, so two appends to one task order on that row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from runtime.ids import MessageId, TaskId, new_message_id
from runtime.store.models import MailboxMessageRow, TaskRow
from runtime.store.records import MailboxMessage, MailboxPart, SenderPart, TextPart


def _to_message(row: MailboxMessageRow) -> MailboxMessage:
    return MailboxMessage(
        message_id=MessageId(row.message_id),
        task_id=TaskId(row.task_id),
        seq=row.seq,
        idempotency_key=row.idempotency_key,
        parts=tuple(part for stored in row.parts if (part := _part_of(stored)) is not None),
        author=row.author,
        created_at=row.created_at,
    )


def _part_of(stored: Mapping[str, Any]) -> MailboxPart | None:
    """A stored part as a value; None for a kind no reader knows (none is written)."""
    match stored.get("type"):
        case "text":
            return TextPart(str(stored.get("text", "")))
        case "sender":
            return SenderPart(
                _text(stored.get("provider")), _text(stored.get("id")), _text(stored.get("name")),
                _text(stored.get("url")), _text(stored.get("message")),
            )
    return None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


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
    parts: Sequence[MailboxPart],
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
        parts=[part.to_json() for part in parts],
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
