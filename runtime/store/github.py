"""GitHub's own rows: deliveries held for the permission lookup, and requested redeliveries.

A held delivery is keyed by its delivery id (a redelivery while it is held is the same row);
it is released once routing has it. A redelivery request is claimed by the delivery's GUID
before it is made, so neither a restart nor a second process ever asks twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, select, update
from sqlalchemy.orm import Session

from runtime.store.inserts import insert_ignoring, parameters
from runtime.store.models import GitHubInboxRow, GitHubRedeliveryRow, SignalRow

_HOLD = insert_ignoring(
    cast(Table, GitHubInboxRow.__table__),
    ["delivery_id", "event", "payload", "received_at", "attempts", "next_at", "last_error"],
)
_CLAIM = insert_ignoring(
    cast(Table, GitHubRedeliveryRow.__table__),
    ["guid", "hook_id", "delivered_at", "requested_at"],
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


def held_count(session: Session) -> int:
    return len(session.scalars(select(GitHubInboxRow.delivery_id)).all())


def known_deliveries(session: Session, guids: Iterable[str]) -> set[str]:
    """Which of these delivery ids (X-GitHub-Delivery) Keel has stored, routed or held."""
    wanted = list(set(guids))
    if not wanted:
        return set()
    routed = session.scalars(
        select(SignalRow.delivery_id).where(
            SignalRow.provider == "github", SignalRow.delivery_id.in_(wanted)
        )
    )
    held = session.scalars(
        select(GitHubInboxRow.delivery_id).where(GitHubInboxRow.delivery_id.in_(wanted))
    )
    return {*routed, *held}


def requested_guids(session: Session, guids: Iterable[str]) -> set[str]:
    """Which of these GUIDs Keel already asked GitHub to redeliver."""
    wanted = list(set(guids))
    if not wanted:
        return set()
    found = session.scalars(
        select(GitHubRedeliveryRow.guid).where(GitHubRedeliveryRow.guid.in_(wanted))
    )
    return set(found)


def claim_redelivery(
    session: Session, hook_id: int, guid: str, delivered_at: datetime, now: datetime
) -> bool:
    """Record that Keel asks for ``guid`` again; False if it was asked already (by anyone)."""
    values = {"guid": guid, "hook_id": hook_id, "delivered_at": delivered_at, "requested_at": now}
    return bool(_CLAIM.execute(session, parameters(values)))


def unclaim_redelivery(session: Session, guid: str) -> None:
    """The request did not reach GitHub: the next pass may ask again."""
    session.execute(delete(GitHubRedeliveryRow).where(GitHubRedeliveryRow.guid == guid))
