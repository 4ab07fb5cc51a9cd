"""GitHub's own rows: the redeliveries the catch-up job asked for, and which deliveries Keel
already has.

A redelivery request is claimed by the delivery's GUID before it is made, so neither a restart
nor a second process ever asks twice. A delivery Keel has is one it routed (a Signal) or one
the intake holds for a permission lookup (``runtime/store/held.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, select
from sqlalchemy.orm import Session

from runtime.store.inserts import insert_ignoring, parameters
from runtime.store.models import GitHubInboxRow, GitHubRedeliveryRow, SignalRow

_CLAIM = insert_ignoring(
    cast(Table, GitHubRedeliveryRow.__table__),
    ["guid", "hook_id", "delivered_at", "requested_at"],
)


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
