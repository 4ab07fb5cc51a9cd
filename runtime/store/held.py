"""Deliveries held by the intake until their asker's permission is known.

A held delivery is keyed by its delivery id (a redelivery while it is held is the same row);
it is released once routing has it. Only GitHub asks for a permission today, so the table
keeps its name, ``github_inbox`` (``GitHubInboxRow``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, select, update
from sqlalchemy.orm import Session

from runtime.store.inserts import insert_ignoring, parameters
from runtime.store.models import GitHubInboxRow

_HOLD = insert_ignoring(
    cast(Table, GitHubInboxRow.__table__),
    ["delivery_id", "event", "payload", "received_at", "attempts", "next_at", "last_error"],
)


@dataclass(frozen=True, slots=True)
class HeldDelivery:
    delivery_id: str
    event: str
    payload: dict[str, Any]
    received_at: datetime
    attempts: int


def hold(
    session: Session, delivery_id: str, event: str, payload: dict[str, Any], now: datetime
) -> bool:
    """Hold a delivery until its permission is known; False if it is held already."""
    values = {
        "delivery_id": delivery_id,
        "event": event,
        "payload": payload,
        "received_at": now,
        "attempts": 0,
        "next_at": now,
        "last_error": None,
    }
    return bool(_HOLD.execute(session, parameters(values)))


def due(session: Session, now: datetime, limit: int) -> list[HeldDelivery]:
    rows = session.scalars(
        select(GitHubInboxRow)
        .where(GitHubInboxRow.next_at <= now)
        .order_by(GitHubInboxRow.next_at)
        .limit(limit)
    )
    return [
        HeldDelivery(r.delivery_id, r.event, dict(r.payload), r.received_at, r.attempts)
        for r in rows
    ]


def postpone(
    session: Session, delivery_id: str, attempts: int, next_at: datetime, error: str
) -> None:
    session.execute(
        update(GitHubInboxRow)
        .where(GitHubInboxRow.delivery_id == delivery_id)
        .values(attempts=attempts, next_at=next_at, last_error=error[:2000])
    )


def release(session: Session, delivery_id: str) -> None:
    session.execute(delete(GitHubInboxRow).where(GitHubInboxRow.delivery_id == delivery_id))
