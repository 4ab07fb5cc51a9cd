"""Execution, transcript, tool-call, evidence and outbox SQL for the executor.

A phase's writes and its transition commit together; ``commit_transition`` fences the write
with the lease id and the expected version, so a stale writer changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from runtime.errors import StaleWrite
from runtime.evidence import EvidenceItem, Strength
from runtime.store.models import (
    EvidenceRow,
    ExecutionRow,
    OutboxRow,
    ToolCallRow,
    TranscriptItemRow,
)


@dataclass(frozen=True, slots=True)
class Run:
    """A snapshot of an Execution as one tick loaded it."""

    task_id: str
    phase: str
    turn: int
    mailbox_position: int
    state: dict[str, Any]
    version: int
    lease_id: str | None
    stop_requested: bool = False  # the task or an ancestor: read when the tick loaded the run


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    seq: int
    item_key: str
    role: str
    kind: str
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    task_id: str
    call_id: str
    turn: int
    idx: int
    name: str
    args: dict[str, Any]
    effect: str
    dispatch_state: str  # pending | dispatching | started | settled
    handle: str | None
    deadline_at: datetime | None
    outcome: str | None  # ok | error | deadline | interrupted | canceled
    result: dict[str, Any] | None
    dispatched_at: datetime | None
    settled_at: datetime | None
    late_reports: int


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    task_id: str
    call_id: str | None
    item: EvidenceItem
    created_at: datetime


def load_run(session: Session, task_id: str) -> Run | None:
    row = session.get(ExecutionRow, task_id)
    if row is None:
        return None
    return Run(
        row.task_id,
        row.phase,
        row.turn,
        row.mailbox_position,
        dict(row.state),
        row.version,
        row.lease_id,
    )


def commit_transition(
    session: Session,
    run: Run,
    lease_id: str,
    *,
    phase: str,
    turn: int,
    mailbox_position: int,
    state: dict[str, Any],
    now: datetime,
) -> int:
    """Advance the execution if nobody else has; returns the new version."""
    statement = (
        update(ExecutionRow)
        .where(
            ExecutionRow.task_id == run.task_id,
            ExecutionRow.version == run.version,
            ExecutionRow.lease_id == lease_id,
        )
        .values(
            phase=phase,
            turn=turn,
            mailbox_position=mailbox_position,
            state=state,
            version=run.version + 1,
            updated_at=now,
        )
    )
    if _rowcount(session.execute(statement)) != 1:
        raise StaleWrite(f"execution {run.task_id} moved past version {run.version}")
    return run.version + 1


def _rowcount(result: Any) -> int:
    assert isinstance(result, CursorResult)
    return result.rowcount


def _insert_ignore(session: Session, model: Any, values: dict[str, Any], keys: list[str]) -> None:
    dialect = session.get_bind().dialect.name
    maker = pg_insert if dialect == "postgresql" else sqlite_insert
    statement = maker(model).values(**values).on_conflict_do_nothing(index_elements=keys)
    session.execute(statement)


def add_transcript_item(
    session: Session,
    task_id: str,
    item_key: str,
    role: str,
    kind: str,
    payload: dict[str, Any],
    now: datetime,
) -> None:
    """Insert once: a second insert of the same deterministic key is a no-op."""
    values = dict(
        task_id=task_id,
        item_key=item_key,
        role=role,
        kind=kind,
        payload=payload,
        created_at=now,
    )
    _insert_ignore(session, TranscriptItemRow, values, ["task_id", "item_key"])


def transcript(session: Session, task_id: str) -> list[TranscriptEntry]:
    query = (
        select(TranscriptItemRow)
        .where(TranscriptItemRow.task_id == task_id)
        .order_by(TranscriptItemRow.item_seq)
    )
    return [
        TranscriptEntry(r.item_seq, r.item_key, r.role, r.kind, r.payload, r.created_at)
        for r in session.scalars(query)
    ]


def _to_call(row: ToolCallRow) -> ToolCallRecord:
    return ToolCallRecord(
        row.task_id,
        row.call_id,
        row.turn,
        row.idx,
        row.name,
        row.args,
        row.effect,
        row.dispatch_state,
        row.handle,
        row.deadline_at,
        row.outcome,
        row.result,
        row.dispatched_at,
        row.settled_at,
        row.late_reports,
    )


def add_tool_call(
    session: Session,
    task_id: str,
    call_id: str,
    *,
    turn: int,
    idx: int,
    name: str,
    args: dict[str, Any],
    effect: str,
) -> None:
    values = dict(
        task_id=task_id,
        call_id=call_id,
        turn=turn,
        idx=idx,
        name=name,
        args=args,
        effect=effect,
        dispatch_state="pending",
        late_reports=0,
    )
    _insert_ignore(session, ToolCallRow, values, ["task_id", "call_id"])


def calls_of_turn(session: Session, task_id: str, turn: int) -> list[ToolCallRecord]:
    query = (
        select(ToolCallRow)
        .where(ToolCallRow.task_id == task_id, ToolCallRow.turn == turn)
        .order_by(ToolCallRow.idx)
    )
    return [_to_call(r) for r in session.scalars(query)]


def all_calls(session: Session, task_id: str) -> list[ToolCallRecord]:
    query = (
        select(ToolCallRow)
        .where(ToolCallRow.task_id == task_id)
        .order_by(ToolCallRow.turn, ToolCallRow.idx)
    )
    return [_to_call(r) for r in session.scalars(query)]


def count_calls(session: Session, task_id: str) -> int:
    query = select(func.count()).select_from(ToolCallRow).where(ToolCallRow.task_id == task_id)
    return session.execute(query).scalar_one()


def mark_dispatching(
    session: Session,
    task_id: str,
    call_ids: Sequence[str],
    deadlines: dict[str, datetime],
    now: datetime,
) -> None:
    for call_id in call_ids:
        session.execute(
            update(ToolCallRow)
            .where(
                ToolCallRow.task_id == task_id,
                ToolCallRow.call_id == call_id,
                ToolCallRow.dispatch_state == "pending",
            )
            .values(dispatch_state="dispatching", dispatched_at=now, deadline_at=deadlines[call_id])
        )


def record_handle(session: Session, task_id: str, call_id: str, handle: str) -> None:
    session.execute(
        update(ToolCallRow)
        .where(
            ToolCallRow.task_id == task_id,
            ToolCallRow.call_id == call_id,
            ToolCallRow.dispatch_state.in_(["dispatching", "started"]),
        )
        .values(dispatch_state="started", handle=handle)
    )


def settle(
    session: Session,
    task_id: str,
    call_id: str,
    *,
    outcome: str,
    result: dict[str, Any],
    now: datetime,
) -> bool:
    """First settled result wins; a later report only bumps ``late_reports``."""
    won = _rowcount(
        session.execute(
            update(ToolCallRow)
            .where(
                ToolCallRow.task_id == task_id,
                ToolCallRow.call_id == call_id,
                ToolCallRow.dispatch_state != "settled",
            )
            .values(dispatch_state="settled", outcome=outcome, result=result, settled_at=now)
        )
    )
    if won:
        return True
    session.execute(
        update(ToolCallRow)
        .where(ToolCallRow.task_id == task_id, ToolCallRow.call_id == call_id)
        .values(late_reports=ToolCallRow.late_reports + 1)
    )
    return False


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
    _insert_ignore(session, EvidenceRow, values, ["task_id", "kind", "ref"])
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


def enqueue_post(
    session: Session,
    *,
    task_id: str,
    purpose: str,
    surface: str,
    thread_ref: str,
    key: str,
    action: str,
    body: str,
    now: datetime,
) -> None:
    """Queue one post; the same idempotency key never queues twice."""
    values = dict(
        task_id=task_id,
        purpose=purpose,
        surface=surface,
        thread_ref=thread_ref,
        idempotency_key=key,
        action=action,
        body=body,
        state="pending",
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
    _insert_ignore(session, OutboxRow, values, ["idempotency_key"])
