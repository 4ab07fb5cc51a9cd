"""Executions: the persisted phase machine of each task, one row per task, and its lease.

A phase's writes and its transition commit together; ``commit_transition`` fences the write
with the lease id and the expected version, so a stale writer changes nothing. Granting or
taking back a lease moves the version too. Row locks (``FOR UPDATE``) are no-ops on SQLite,
where ``BEGIN IMMEDIATE`` already serialises writers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, bindparam, or_, select, update
from sqlalchemy.orm import Session

from runtime.errors import StaleWrite
from runtime.execution import FIRST_PHASE, ON_ERROR, Failure, Phase, RunState, phase_named
from runtime.ids import TaskId, new_token
from runtime.store.models import ExecutionRow, Json, UtcDateTime
from runtime.store.prepared import Prepared
from runtime.store.records import Lease
from runtime.store.tool_calls import ToolCallRecord
from runtime.store.transcripts import TranscriptEntry


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


# Statements are built once, with bind parameters: building a statement per call costs more
# than running it.
_EXECUTIONS = cast(Table, ExecutionRow.__table__)

_LOAD_RUN = Prepared(select(
    _EXECUTIONS.c.task_id,
    _EXECUTIONS.c.phase,
    _EXECUTIONS.c.turn,
    _EXECUTIONS.c.mailbox_position,
    _EXECUTIONS.c.state,
    _EXECUTIONS.c.version,
    _EXECUTIONS.c.lease_id,
).where(_EXECUTIONS.c.task_id == bindparam("b_task_id")))

ADVANCE = (
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
_ADVANCE = Prepared(ADVANCE)


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


@dataclass(frozen=True, slots=True)
class Advance:
    """What a transition writes on the execution."""

    phase: Phase
    turn: int
    mailbox_position: int
    state: RunState
    now: datetime


def commit_transition(session: Session, run: Run, lease_id: str, advance: Advance) -> int:
    """Advance the execution if nobody else has; returns the new version."""
    if _ADVANCE.execute(session, transition_parameters(run, lease_id, advance)) != 1:
        raise StaleWrite(f"execution {run.task_id} moved past version {run.version}")
    return run.version + 1


def transition_parameters(run: Run, lease_id: str, advance: Advance) -> dict[str, object]:
    """The parameters of ``ADVANCE`` (and of statements built on it) for one transition."""
    return {
        "b_task_id": run.task_id,
        "b_version": run.version,
        "b_lease_id": lease_id,
        "b_phase": advance.phase,
        "b_turn": advance.turn,
        "b_mailbox_position": advance.mailbox_position,
        "b_state": advance.state.to_json(),
        "b_new_version": run.version + 1,
        "b_now": advance.now,
    }


# -- creation and leases ---------------------------------------------------------------------


_INSERT_EXECUTION = Prepared(
    cast(Table, ExecutionRow.__table__).insert().values(
        task_id=bindparam("b_task_id"), phase=FIRST_PHASE, turn=0, mailbox_position=0,
        state=bindparam("b_state"), version=0, updated_at=bindparam("b_now"),
    )
)


def add_execution(session: Session, task_id: str, now: datetime) -> None:
    """The new task's execution, at its first phase with an empty state (a Core insert: every
    webhook that starts a task runs it)."""
    _INSERT_EXECUTION.execute(
        session, {"b_task_id": task_id, "b_state": RunState().to_json(), "b_now": now}
    )


_NOW = bindparam("b_now", type_=UtcDateTime)
_TAKE_LEASE = Prepared(
    update(_EXECUTIONS)
    .where(
        _EXECUTIONS.c.task_id == bindparam("b_task_id"),
        _EXECUTIONS.c.phase != "done",
        or_(
            _EXECUTIONS.c.lease_id.is_(None),
            _EXECUTIONS.c.lease_expires_at.is_(None),
            _EXECUTIONS.c.lease_expires_at <= _NOW,
        ),
    )
    .values(
        lease_id=bindparam("b_lease_id"),
        lease_owner=bindparam("b_owner"),
        lease_expires_at=bindparam("b_expires", type_=UtcDateTime),
        version=_EXECUTIONS.c.version + 1,
        updated_at=_NOW,
    )
)
_GIVE_BACK = Prepared(
    update(_EXECUTIONS)
    .where(
        _EXECUTIONS.c.task_id == bindparam("b_task_id"),
        _EXECUTIONS.c.lease_id == bindparam("b_lease_id"),
    )
    .values(lease_id=None, lease_owner=None, lease_expires_at=None)
)


def take_lease(
    session: Session, task_id: str, owner: str, now: datetime, lease_seconds: float
) -> Lease | None:
    """A new lease on the execution, unless it is done or a live lease holds it; the version
    moves, so whoever held an expired lease cannot commit. One statement, which locks the
    row as ``lock_execution`` would."""
    lease_id = new_token()
    expires = now + timedelta(seconds=lease_seconds)
    params = {
        "b_task_id": task_id, "b_now": now, "b_lease_id": lease_id, "b_owner": owner,
        "b_expires": expires,
    }
    if _TAKE_LEASE.execute(session, params) != 1:
        return None
    return Lease(TaskId(task_id), lease_id, owner, expires)


def give_back_lease(session: Session, task_id: str, lease_id: str) -> bool:
    """Clear the lease if ``lease_id`` still holds it; False if it was lost meanwhile."""
    return _GIVE_BACK.execute(session, {"b_task_id": task_id, "b_lease_id": lease_id}) == 1


@dataclass(frozen=True, slots=True)
class LeaseHold:
    """What the scheduler reads of an execution it locked: its phase, what it has read of
    the mailbox, and who holds its lease until when."""

    task_id: str
    phase: str
    mailbox_position: int
    lease_id: str | None
    lease_expires_at: datetime | None


def lock_execution(session: Session, task_id: str) -> LeaseHold | None:
    row = _locked_row(session, task_id)
    if row is None:
        return None
    return LeaseHold(
        row.task_id, row.phase, row.mailbox_position, row.lease_id, row.lease_expires_at
    )


def _locked_row(session: Session, task_id: str) -> ExecutionRow | None:
    return session.scalars(
        select(ExecutionRow).where(ExecutionRow.task_id == task_id).with_for_update()
    ).first()


def lease_is_live(execution: LeaseHold, now: datetime) -> bool:
    expires = execution.lease_expires_at
    return execution.lease_id is not None and expires is not None and expires > now


def renew_lease(
    session: Session, task_id: str, lease_id: str, now: datetime, lease_seconds: float
) -> datetime | None:
    """Extend the lease if ``lease_id`` still holds it (locking the row); its new expiry, or
    None if the lease was lost."""
    execution = _locked_row(session, task_id)
    if execution is None or execution.lease_id != lease_id:
        return None
    expires = execution.lease_expires_at = now + timedelta(seconds=lease_seconds)
    return expires


def _clear_lease(execution: ExecutionRow) -> None:
    execution.lease_id = None
    execution.lease_owner = None
    execution.lease_expires_at = None


def take_back_expired(session: Session, now: datetime, limit: int) -> list[str]:
    """Clear up to ``limit`` leases that expired, moving each execution's version so that
    the worker that lost its lease cannot commit; the task ids whose leases went."""
    query = (
        select(ExecutionRow)
        .where(ExecutionRow.lease_id.is_not(None), ExecutionRow.lease_expires_at < now)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    expired = session.scalars(query).all()
    for execution in expired:
        _clear_lease(execution)
        execution.version += 1
    return [execution.task_id for execution in expired]


