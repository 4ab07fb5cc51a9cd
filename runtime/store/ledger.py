"""The evidence ledger: what each task can show for its claims, one row per (task, kind,
ref), the strongest observation of a fact kept."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, select, update
from sqlalchemy.orm import Session

from runtime.evidence import EvidenceItem, Strength
from runtime.store.inserts import insert_ignoring, parameters
from runtime.store.models import EvidenceRow


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    task_id: str
    call_id: str | None
    item: EvidenceItem
    created_at: datetime


_ADD = insert_ignoring(
    cast(Table, EvidenceRow.__table__),
    ["task_id", "root_id", "call_id", "kind", "ref", "strength", "detail", "created_at"],
    ["task_id", "kind", "ref"],
)


def add_evidence(
    session: Session,
    task_id: str,
    root_id: str,
    call_id: str | None,
    item: EvidenceItem,
    now: datetime,
) -> None:
    values = dict(
        task_id=task_id,
        root_id=root_id,
        call_id=call_id,
        kind=item.kind,
        ref=item.ref,
        strength=int(item.strength),
        detail=item.detail,
        created_at=now,
    )
    _ADD.execute(session, parameters(values))
    # A stronger observation of the same fact upgrades the stored one.
    session.execute(
        update(EvidenceRow)
        .where(
            EvidenceRow.task_id == task_id,
            EvidenceRow.kind == item.kind,
            EvidenceRow.ref == item.ref,
            EvidenceRow.strength < int(item.strength),
        )
        .values(strength=int(item.strength), detail=item.detail)
    )


def evidence_of_tree(session: Session, root_id: str) -> list[EvidenceRecord]:
    query = (
        select(EvidenceRow).where(EvidenceRow.root_id == root_id).order_by(EvidenceRow.evidence_id)
    )
    return [
        EvidenceRecord(
            r.task_id,
            r.call_id,
            EvidenceItem(r.kind, r.ref, Strength(r.strength), r.detail),  # type: ignore[arg-type]
            r.created_at,
        )
        for r in session.scalars(query)
    ]
