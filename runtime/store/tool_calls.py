"""Tool calls: the pending-tool record of each call the model asked for, keyed by call id.

A call is marked ``dispatching`` before its tool runs; the first settled result is
authoritative, and a later one only counts as a late report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from runtime.store.inserts import insert_ignoring
from runtime.store.models import Json, ToolCallRow, UtcDateTime
from runtime.store.prepared import Prepared


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

    # What an operator reads of a call, derived here so every reader sees the same answer.
    @property
    def output(self) -> str | None:
        output = (self.result or {}).get("output")
        return None if output is None else str(output)

    @property
    def is_error(self) -> bool:
        return bool((self.result or {}).get("is_error"))

    @property
    def duration_s(self) -> float | None:
        if self.dispatched_at is None or self.settled_at is None:
            return None
        return (self.settled_at - self.dispatched_at).total_seconds()

    @property
    def interrupted(self) -> bool:
        return self.outcome == "interrupted"


_CALLS = cast(Table, ToolCallRow.__table__)

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

_ADD_CALLS = insert_ignoring(
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
_MARKING: dict[int, Prepared] = {}  # by the number of calls marked at once


def _marking(count: int) -> Prepared:
    """One statement marks a batch: ``count`` call ids in an ``IN`` list of their own."""
    found = _MARKING.get(count)
    if found is None:
        found = _MARKING[count] = Prepared(
            update(_CALLS)
            .where(
                _CALLS.c.task_id == bindparam("b_task_id"),
                _CALLS.c.call_id.in_([bindparam(f"b_call_{n}") for n in range(count)]),
                _CALLS.c.dispatch_state == "pending",
            )
            .values(
                dispatch_state="dispatching",
                dispatched_at=bindparam("b_now", type_=UtcDateTime),
                deadline_at=bindparam("b_deadline", type_=UtcDateTime),
            )
        )
    return found


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
    session: Session, task_id: str, call_ids: Sequence[str], deadline: datetime, now: datetime
) -> None:
    """Mark the pending calls among ``call_ids`` as ``dispatching``, due by ``deadline``."""
    if not call_ids:
        return
    params: dict[str, str | datetime] = {"b_task_id": task_id, "b_now": now, "b_deadline": deadline}
    params.update((f"b_call_{n}", call_id) for n, call_id in enumerate(call_ids))
    _marking(len(call_ids)).execute(session, params)


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
