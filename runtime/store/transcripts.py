"""Transcript items: what the model saw and said, in order, each under a deterministic key
(``mbx:<message>``, ``call:<call>``, ``result:<call>``, ``model:<turn>:<index>``), so a
repeated write of the same item is a no-op."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.orm import Session

from runtime.store.inserts import insert_ignoring
from runtime.store.models import TranscriptItemRow
from runtime.store.prepared import Prepared


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    seq: int
    item_key: str
    role: str
    kind: str
    payload: dict[str, Any]
    created_at: datetime


_TRANSCRIPT = cast(Table, TranscriptItemRow.__table__)

_TRANSCRIPT_OF = Prepared(
    select(
        _TRANSCRIPT.c.id,
        _TRANSCRIPT.c.item_key,
        _TRANSCRIPT.c.role,
        _TRANSCRIPT.c.kind,
        _TRANSCRIPT.c.payload,
        _TRANSCRIPT.c.created_at,
    )
    .where(_TRANSCRIPT.c.task_id == bindparam("b_task_id"), _TRANSCRIPT.c.id > bindparam("b_after"))
    .order_by(_TRANSCRIPT.c.id)
)

_ADD_ITEMS = insert_ignoring(
    _TRANSCRIPT,
    ["task_id", "item_key", "role", "kind", "payload", "created_at"],
    ["task_id", "item_key"],
)


@dataclass(frozen=True, slots=True)
class NewItem:
    """A transcript item to insert; ``item_key`` is its deterministic id within the task."""

    item_key: str
    role: str
    kind: str
    payload: dict[str, Any]


def add_transcript_items(
    session: Session, task_id: str, items: Sequence[NewItem], now: datetime
) -> None:
    """Insert each once: a second insert of the same deterministic key is a no-op."""
    if not items:
        return
    rows = [
        {
            "v_task_id": task_id,
            "v_item_key": i.item_key,
            "v_role": i.role,
            "v_kind": i.kind,
            "v_payload": i.payload,
            "v_created_at": now,
        }
        for i in items
    ]
    _ADD_ITEMS.execute_many(session, rows)


def add_transcript_item(
    session: Session,
    task_id: str,
    item_key: str,
    role: str,
    kind: str,
    payload: dict[str, Any],
    now: datetime,
) -> None:
    add_transcript_items(session, task_id, [NewItem(item_key, role, kind, payload)], now)


def transcript(session: Session, task_id: str, *, after: int = 0) -> list[TranscriptEntry]:
    """The task's transcript in order; with ``after``, only the items after that ``seq``."""
    rows = _TRANSCRIPT_OF.rows(session, {"b_task_id": task_id, "b_after": after})
    return [TranscriptEntry(*r) for r in rows]
