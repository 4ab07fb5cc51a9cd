"""Execution, transcript, tool-call, evidence and outbox SQL for the executor.

A phase's writes and its transition commit together; ``commit_transition`` fences the write
with the lease id and the expected version, so a stale writer changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from runtime.errors import StaleWrite
from runtime.evidence import EvidenceItem, Strength
from runtime.execution import ON_ERROR, Failure, Phase, RunState, phase_named
from runtime.store.models import (
    EvidenceRow,
    ExecutionRow,
    Json,
    OutboxRow,
    ToolCallRow,
    TranscriptItemRow,
    UtcDateTime,
)
from runtime.store.prepared import Prepared
from runtime.surfaces import Action
from runtime.threads import ThreadRef


@dataclass(frozen=True, slots=True)
class Run:
    """A snapshot of an Execution as one tick loaded it."""

    task_id: str
    phase: Phase
    turn: int
    mailbox_position: int
    state: RunState
    version: int
    lease_id: str | None
    # Read when the tick loaded the run (None where the phase does not need them): whether a
    # stop is recorded on the task or an ancestor, the current turn's tool calls, and the
    # transcript.
    stop_requested: bool = False
    calls: tuple[ToolCallRecord, ...] | None = None
    transcript: tuple[TranscriptEntry, ...] | None = None


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


# The executor's statements are built once, with bind parameters: building a statement per
# call costs more than running it. Insert-once statements differ by dialect.
_EXECUTIONS = cast(Table, ExecutionRow.__table__)
_TRANSCRIPT = cast(Table, TranscriptItemRow.__table__)
_CALLS = cast(Table, ToolCallRow.__table__)

_LOAD_RUN = Prepared(select(
    _EXECUTIONS.c.task_id,
    _EXECUTIONS.c.phase,
    _EXECUTIONS.c.turn,
    _EXECUTIONS.c.mailbox_position,
    _EXECUTIONS.c.state,
    _EXECUTIONS.c.version,
    _EXECUTIONS.c.lease_id,
).where(_EXECUTIONS.c.task_id == bindparam("b_task_id")))

_ADVANCE = Prepared(
    update(_EXECUTIONS)
    .where(
        _EXECUTIONS.c.task_id == bindparam("b_task_id"),
        _EXECUTIONS.c.version == bindparam("b_version"),
        _EXECUTIONS.c.lease_id == bindparam("b_lease_id"),
    )
    .values(
        phase=bindparam("b_phase"),
        turn=bindparam("b_turn"),
        mailbox_position=bindparam("b_mailbox_position"),
        state=bindparam("b_state", type_=Json),
        version=bindparam("b_new_version"),
        updated_at=bindparam("b_now", type_=UtcDateTime),
    )
)

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

_CALL_COLUMNS = [
    _CALLS.c[name]
    for name in (
        "task_id", "call_id", "turn", "idx", "name", "args", "effect", "dispatch_state",
        "handle", "deadline_at", "outcome", "result", "dispatched_at", "settled_at",
        "late_reports",
    )
]
_CALLS_OF_TASK = select(*_CALL_COLUMNS).where(_CALLS.c.task_id == bindparam("b_task_id"))
_CALLS_OF_TURN = Prepared(
    _CALLS_OF_TASK.where(_CALLS.c.turn == bindparam("b_turn")).order_by(_CALLS.c.idx)
)
_ALL_CALLS = Prepared(_CALLS_OF_TASK.order_by(_CALLS.c.turn, _CALLS.c.idx))

def _insert_ignoring(table: Table, columns: Sequence[str], keys: Sequence[str]) -> Prepared:
    """An insert of ``columns`` (parameters ``v_<column>``) that leaves an existing row with the
    same unique ``keys`` as it is."""

    def make(dialect: str) -> Any:
        maker = pg_insert if dialect == "postgresql" else sqlite_insert
        values = {c: bindparam(f"v_{c}", type_=table.c[c].type) for c in columns}
        return maker(table).values(values).on_conflict_do_nothing(index_elements=list(keys))

    return Prepared(per_dialect=make)


_ADD_ITEMS = _insert_ignoring(
    _TRANSCRIPT,
    ["task_id", "item_key", "role", "kind", "payload", "created_at"],
    ["task_id", "item_key"],
)
_ADD_CALLS = _insert_ignoring(
    _CALLS,
    [
        "task_id", "call_id", "turn", "idx", "name", "args", "effect", "dispatch_state",
        "outcome", "result", "settled_at", "late_reports",
    ],
    ["task_id", "call_id"],
)

_THIS_CALL = (
    _CALLS.c.task_id == bindparam("b_task_id"),
    _CALLS.c.call_id == bindparam("b_call_id"),
)
_MARK_DISPATCHING = Prepared(
    update(_CALLS)
    .where(*_THIS_CALL, _CALLS.c.dispatch_state == "pending")
    .values(
        dispatch_state="dispatching",
        dispatched_at=bindparam("b_now", type_=UtcDateTime),
        deadline_at=bindparam("b_deadline", type_=UtcDateTime),
    )
)
_RECORD_HANDLE = (
    update(_CALLS)
    .where(*_THIS_CALL, _CALLS.c.dispatch_state.in_(["dispatching", "started"]))
    .values(dispatch_state="started", handle=bindparam("b_handle"))
)
_SETTLE = Prepared(
    update(_CALLS)
    .where(*_THIS_CALL, _CALLS.c.dispatch_state != "settled")
    .values(
        dispatch_state="settled",
        outcome=bindparam("b_outcome"),
        result=bindparam("b_result", type_=Json),
        settled_at=bindparam("b_now", type_=UtcDateTime),
    )
)
_LATE_REPORT = Prepared(
    update(_CALLS).where(*_THIS_CALL).values(late_reports=_CALLS.c.late_reports + 1)
)

_INSERT_ONCE: dict[tuple[str, str], Any] = {}


def _insert_ignore(
    session: Session, model: Any, values: dict[str, Any] | list[dict[str, Any]], keys: list[str]
) -> None:
    """Insert unless a row with the same unique ``keys`` exists (the statement is cached)."""
    dialect = session.get_bind().dialect.name
    statement = _INSERT_ONCE.get((dialect, model.__tablename__))
    if statement is None:
        maker = pg_insert if dialect == "postgresql" else sqlite_insert
        statement = maker(model.__table__).on_conflict_do_nothing(index_elements=keys)
        _INSERT_ONCE[(dialect, model.__tablename__)] = statement
    session.connection().execute(statement, values)


def load_run(session: Session, task_id: str) -> Run | None:
    row = _LOAD_RUN.first(session, {"b_task_id": task_id})
    if row is None:
        return None
    state = RunState.from_json(row[4])
    phase = phase_named(row[1])
    if phase is None:
        # Written by a version that knows more phases: this one can only report it.
        failure = Failure(row[1], f"unknown phase {row[1]!r}")
        phase, state = ON_ERROR, replace(state, error=failure)
    return Run(row[0], phase, row[2], row[3], state, row[5], row[6])


def commit_transition(
    session: Session,
    run: Run,
    lease_id: str,
    *,
    phase: Phase,
    turn: int,
    mailbox_position: int,
    state: RunState,
    now: datetime,
) -> int:
    """Advance the execution if nobody else has; returns the new version."""
    params = {
        "b_task_id": run.task_id,
        "b_version": run.version,
        "b_lease_id": lease_id,
        "b_phase": phase,
        "b_turn": turn,
        "b_mailbox_position": mailbox_position,
        "b_state": state.to_json(),
        "b_new_version": run.version + 1,
        "b_now": now,
    }
    if _ADVANCE.execute(session, params) != 1:
        raise StaleWrite(f"execution {run.task_id} moved past version {run.version}")
    return run.version + 1


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


def _to_call(row: Sequence[Any]) -> ToolCallRecord:
    """A row of ``_CALL_COLUMNS``, which are in ``ToolCallRecord``'s order."""
    return ToolCallRecord(*row)


@dataclass(frozen=True, slots=True)
class NewCall:
    """A call the model asked for. With ``refused`` (what the model is told instead) it is
    recorded already settled as an error, and never dispatched."""

    call_id: str
    turn: int
    idx: int
    name: str
    args: dict[str, Any]
    effect: str
    refused: str | None = None


def add_tool_calls(
    session: Session, task_id: str, calls: Sequence[NewCall], now: datetime | None = None
) -> None:
    """Record calls as ``pending`` (refused ones as settled); a call id already recorded is
    left as it is."""
    if not calls:
        return
    rows = [
        {
            "v_task_id": task_id,
            "v_call_id": c.call_id,
            "v_turn": c.turn,
            "v_idx": c.idx,
            "v_name": c.name,
            "v_args": c.args,
            "v_effect": c.effect,
            "v_dispatch_state": "pending" if c.refused is None else "settled",
            "v_outcome": None if c.refused is None else "error",
            "v_result": None if c.refused is None else {"output": c.refused, "is_error": True},
            "v_settled_at": None if c.refused is None else now,
            "v_late_reports": 0,
        }
        for c in calls
    ]
    _ADD_CALLS.execute_many(session, rows)


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
    add_tool_calls(session, task_id, [NewCall(call_id, turn, idx, name, args, effect)])


def calls_of_turn(session: Session, task_id: str, turn: int) -> list[ToolCallRecord]:
    rows = _CALLS_OF_TURN.rows(session, {"b_task_id": task_id, "b_turn": turn})
    return [_to_call(r) for r in rows]


def all_calls(session: Session, task_id: str) -> list[ToolCallRecord]:
    return [_to_call(r) for r in _ALL_CALLS.rows(session, {"b_task_id": task_id})]


def mark_dispatching(
    session: Session,
    task_id: str,
    call_ids: Sequence[str],
    deadlines: dict[str, datetime],
    now: datetime,
) -> None:
    if not call_ids:
        return
    params = [
        {"b_task_id": task_id, "b_call_id": c, "b_now": now, "b_deadline": deadlines[c]}
        for c in call_ids
    ]
    _MARK_DISPATCHING.execute_many(session, params)


def record_handle(session: Session, task_id: str, call_id: str, handle: str) -> None:
    params = {"b_task_id": task_id, "b_call_id": call_id, "b_handle": handle}
    session.connection().execute(_RECORD_HANDLE, params)


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
    this = {"b_task_id": task_id, "b_call_id": call_id}
    params = {**this, "b_outcome": outcome, "b_result": result, "b_now": now}
    if _SETTLE.execute(session, params):
        return True
    _LATE_REPORT.execute(session, this)
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
    thread: ThreadRef,
    key: str,
    action: str,
    body: str,
    now: datetime,
    actions: Sequence[Action] = (),
) -> None:
    """Queue one post; the same idempotency key never queues twice."""
    values = dict(
        task_id=task_id,
        purpose=purpose,
        surface=thread.surface,
        thread_ref=str(thread),
        idempotency_key=key,
        action=action,
        body=body,
        actions=[a.to_json() for a in actions] or None,
        state="pending",
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
    _insert_ignore(session, OutboxRow, values, ["idempotency_key"])
