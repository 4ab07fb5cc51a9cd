"""Signal and RouteAttempt SQL: admitting a Signal exactly once and recording its route.

Every function takes an open Session inside a transaction. A Signal and its decision are
stored in one transaction (``read_admission``, then the caller decides, then
``insert_signal``): the unique constraints on (provider, delivery_id) and dedupe_key are the
authority (``ON CONFLICT DO NOTHING``), the reads before the insert only classify.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, cast, get_args

from sqlalchemy import String, Table, bindparam, func, null, select, update
from sqlalchemy.orm import Session

from runtime.ids import SignalId, TaskId, new_signal_id
from runtime.store import tasks as q
from runtime.store.inserts import insert_ignoring
from runtime.store.models import OutboxRow, RouteAttemptRow, SignalRow, TaskRow, UtcDateTime
from runtime.store.prepared import Prepared
from runtime.store.records import TERMINAL, SignalActor, Task, actor_json
from runtime.threads import SlackThread, ThreadRef, parse_thread, text_of, thread_of

# What became of a Signal; stored as its text in ``signals.decision``.
Decision = Literal["append", "new_task", "drop", "daemon", "stop", "escalated", "pending"]
_DECISIONS: tuple[Decision, ...] = get_args(Decision)
PENDING: Decision = "pending"
_TERMINAL = [status.value for status in TERMINAL]


@dataclass(frozen=True, slots=True)
class SignalFacts:
    """What an incoming Signal stores; the decision comes from the caller's verdict."""

    provider: str
    delivery_id: str
    dedupe_key: str
    kind: str
    thread_ref: ThreadRef | None
    objective_key: str | None
    actor: SignalActor | None
    text: str
    received_at: datetime
    message_ref: ThreadRef | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class SignalRecord:
    signal_id: SignalId
    provider: str
    delivery_id: str
    dedupe_key: str
    kind: str
    thread_ref: ThreadRef | None
    objective_key: str | None
    actor: SignalActor | None
    text: str
    decision: Decision
    reason: str | None
    task_id: TaskId | None
    received_at: datetime
    plan: Mapping[str, Any] | None = None
    message_ref: ThreadRef | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class RouteAttempt:
    signal_id: SignalId
    attempt: int
    target_task_id: TaskId | None
    idempotency_key: str
    outcome: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ObjectiveState:
    """The live owner of an objective key, and its latest task if that one is terminal."""

    active: Task | None
    latest_terminal: Task | None
    ci_followups: int = 0  # CI results that reached the objective (counted for CI results)


@dataclass(frozen=True, slots=True)
class Admission:
    """What the decision reads: whether the fact is already stored, and each objective's state."""

    is_duplicate: bool
    objectives: Mapping[str, ObjectiveState]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to store with the Signal. ``decision == "pending"`` means an effect follows."""

    decision: Decision
    reason: str | None = None
    task_id: str | None = None
    objective_key: str | None = None
    plan: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Redelivered:
    """The same delivery was stored before; its record as it stands."""

    record: SignalRecord


def read_admission(
    session: Session, facts: SignalFacts, objective_keys: Sequence[str]
) -> Admission | Redelivered:
    """What the decision reads, inside the admitting transaction: the record of this very
    delivery if it was stored before, else whether its fact is and each objective's state."""
    earlier = _by_delivery(session, facts.provider, facts.delivery_id)
    if earlier is not None:
        return Redelivered(earlier)
    is_duplicate = _dedupe_key_taken(session, facts.dedupe_key)
    ci = facts.kind == "ci_result"
    states = {key: objective_state(session, key, ci) for key in dict.fromkeys(objective_keys)}
    return Admission(is_duplicate, MappingProxyType(states))


def insert_signal(
    session: Session, facts: SignalFacts, admission: Admission, verdict: Verdict
) -> SignalRecord | None:
    """Store the Signal with the verdict decided on ``admission``, read in this transaction.

    A second fact under the same dedupe key (another delivery of one message) is stored too,
    under a per-delivery key, so it is recorded and never acted on twice. None when a
    concurrent writer took one of the unique keys first: a new read sees what it wrote.
    """
    duplicate = admission.is_duplicate
    key = f"dup:{facts.provider}:{facts.delivery_id}" if duplicate else facts.dedupe_key
    return _insert(session, facts, key, verdict)


def objective_state(session: Session, objective_key: str, count_ci: bool = False) -> ObjectiveState:
    """Root tasks only: a delegated child never owns a thread's objective."""
    active, latest = q.newest_roots(session, objective_key)
    terminal = latest if latest is not None and latest.status.is_terminal else None
    return ObjectiveState(
        active=active,
        latest_terminal=terminal,
        ci_followups=_ci_followups(session, objective_key) if count_ci else 0,
    )


_SIGNALS = cast(Table, SignalRow.__table__)
_ATTEMPTS = cast(Table, RouteAttemptRow.__table__)
_SET_DECISION = Prepared(
    update(_SIGNALS)
    .where(_SIGNALS.c.id == bindparam("b_signal_id"))
    .values(
        decision=bindparam("b_decision"), reason=bindparam("b_reason"),
        task_id=bindparam("b_task_id"), plan=null(),
    )
)


def _ci_followups(session: Session, objective_key: str) -> int:
    acted = select(func.count()).where(
        SignalRow.objective_key == objective_key,
        SignalRow.kind == "ci_result",
        SignalRow.decision.in_(("append", "new_task", "pending")),
    )
    return int(session.execute(acted).scalar_one())


def set_decision(
    session: Session, signal_id: str, decision: Decision, reason: str | None, task_id: str | None
) -> None:
    """The final decision; the plan it carried out is done with."""
    session.flush()
    _SET_DECISION.execute(
        session,
        {"b_signal_id": signal_id, "b_decision": decision, "b_reason": _fit(reason, 200),
         "b_task_id": task_id},
    )


# The attempt's number is the next of its signal's, in the same statement as the insert.
_ADD_ATTEMPT = Prepared(
    _ATTEMPTS.insert().from_select(
        ["signal_id", "attempt", "target_task_id", "idempotency_key", "outcome", "created_at"],
        select(
            bindparam("b_signal_id", type_=String),
            func.coalesce(func.max(_ATTEMPTS.c.attempt), 0) + 1,
            bindparam("b_target", type_=String),
            bindparam("b_key", type_=String),
            bindparam("b_outcome", type_=String),
            bindparam("b_now", type_=UtcDateTime),
        ).where(_ATTEMPTS.c.signal_id == bindparam("b_signal_id")),
    )
)


def add_attempt(
    session: Session,
    signal_id: str,
    *,
    target_task_id: str | None,
    idempotency_key: str,
    outcome: str,
    now: datetime,
) -> None:
    """Record one try; attempts of a signal are numbered 1, 2, … in the order recorded."""
    session.flush()
    _ADD_ATTEMPT.execute(
        session,
        {"b_signal_id": signal_id, "b_target": target_task_id, "b_key": idempotency_key,
         "b_outcome": _fit(outcome, 40) or "", "b_now": now},
    )


def attempts_for(session: Session, signal_id: str) -> list[RouteAttempt]:
    query = (
        select(RouteAttemptRow)
        .where(RouteAttemptRow.signal_id == signal_id)
        .order_by(RouteAttemptRow.attempt)
    )
    return [_to_attempt(row) for row in session.scalars(query)]


def get_signal(session: Session, signal_id: str, *, lock: bool = False) -> SignalRecord | None:
    """The signal; ``lock``: its row locked, read as committed (a second locker waits)."""
    row = session.get(SignalRow, signal_id, with_for_update=lock, populate_existing=lock)
    return to_record(row) if row is not None else None


def find_signal(session: Session, provider: str, delivery_id: str) -> SignalRecord | None:
    return _by_delivery(session, provider, delivery_id)


def pending_signals(session: Session, received_before: datetime, limit: int) -> list[SignalRecord]:
    query = (
        select(SignalRow)
        .where(SignalRow.decision == PENDING, SignalRow.received_at <= received_before)
        .order_by(SignalRow.received_at, SignalRow.signal_id)
        .limit(limit)
    )
    return [to_record(row) for row in session.scalars(query)]


def owner_of_message(
    session: Session, message: SlackThread, fact_key: str
) -> tuple[str, ThreadRef] | None:
    """The (objective, thread) a Slack message belongs to: one of our posts (where its outbox
    row landed, in whichever thread), or a message someone sent us (the Signal stored under
    ``fact_key``, the message's dedupe key)."""
    ts = message.target_ts
    landed = f"slack:{message.team}/{message.channel}/%:{ts}"
    ours = session.execute(
        select(TaskRow.objective_key, OutboxRow.thread_ref)
        .join(OutboxRow, OutboxRow.task_id == TaskRow.task_id)
        .where(OutboxRow.landed_on.like(landed))
        .limit(1)
    ).first()
    if ours is not None and ours[0]:
        return str(ours[0]), parse_thread(ours[1])
    theirs = session.execute(
        select(SignalRow.objective_key, SignalRow.thread_ref)
        .where(SignalRow.dedupe_key == fact_key)
        .limit(1)
    ).first()
    if theirs is not None and theirs[0] and theirs[1]:
        return str(theirs[0]), parse_thread(theirs[1])
    return None


def task_created_under(session: Session, creation_key: str) -> Task | None:
    """The root task scheduled under ``creation_key`` (its child_key), if one was."""
    return q.root_created_under(session, creation_key)


def to_record(row: SignalRow) -> SignalRecord:
    return _record({f: getattr(row, f) for f in _SIGNAL_FIELDS})


def _record(values: Mapping[str, Any]) -> SignalRecord:
    """A record from a row's stored values, by field: thread refs parsed, the JSON fields
    read-only, the decision checked."""
    plan = values["plan"]
    return SignalRecord(**{
        **values,
        "signal_id": SignalId(values["signal_id"]),
        "thread_ref": thread_of(values["thread_ref"]),
        "actor": SignalActor.from_json(values["actor"]),
        "decision": _decision(values["signal_id"], values["decision"]),
        "task_id": TaskId(values["task_id"]) if values["task_id"] else None,
        "plan": MappingProxyType(dict(plan)) if plan is not None else None,
        "message_ref": thread_of(values["message_ref"]),
    })


_SIGNAL_FIELDS = (
    "signal_id", "provider", "delivery_id", "dedupe_key", "kind", "thread_ref",
    "objective_key", "actor", "text", "decision", "reason", "task_id", "received_at", "plan",
    "message_ref", "url",
)
_SIGNAL_COLUMNS = [_SIGNALS.c["id" if f == "signal_id" else f] for f in _SIGNAL_FIELDS]
_BY_DELIVERY = Prepared(
    select(*_SIGNAL_COLUMNS)
    .where(
        _SIGNALS.c.provider == bindparam("b_provider"),
        _SIGNALS.c.delivery_id == bindparam("b_delivery_id"),
    )
    .limit(1)
)
_DEDUPE_KEY_TAKEN = Prepared(
    select(_SIGNALS.c.id).where(_SIGNALS.c.dedupe_key == bindparam("b_key")).limit(1)
)


# Either unique key may conflict: the delivery (a redelivery) or the dedupe key (another
# delivery of one message).
_INSERT_SIGNAL = insert_ignoring(_SIGNALS, [column.name for column in _SIGNAL_COLUMNS])
_COLUMN_OF = {f: column.name for f, column in zip(_SIGNAL_FIELDS, _SIGNAL_COLUMNS, strict=True)}


def _insert(
    session: Session, facts: SignalFacts, dedupe_key: str, verdict: Verdict
) -> SignalRecord | None:
    """Core insert that ignores a conflict; the record is made from what was written (the
    JSON fields as they read back), not read again."""
    record = SignalRecord(
        signal_id=new_signal_id(),
        provider=facts.provider,
        delivery_id=facts.delivery_id,
        dedupe_key=dedupe_key,
        kind=_fit(facts.kind, 30) or "",
        thread_ref=facts.thread_ref,
        objective_key=verdict.objective_key or facts.objective_key,
        actor=facts.actor,
        text=facts.text,
        decision=verdict.decision,
        reason=_fit(verdict.reason, 200),
        task_id=TaskId(verdict.task_id) if verdict.task_id else None,
        received_at=facts.received_at.astimezone(UTC),
        plan=(
            MappingProxyType(json.loads(json.dumps(dict(verdict.plan))))
            if verdict.plan is not None else None
        ),
        message_ref=facts.message_ref,
        url=facts.url,
    )
    values = {f"v_{_COLUMN_OF[f]}": getattr(record, f) for f in _SIGNAL_FIELDS}
    values.update(
        v_thread_ref=text_of(facts.thread_ref),
        v_message_ref=text_of(facts.message_ref),
        v_actor=actor_json(facts.actor),
        v_plan=dict(record.plan) if record.plan is not None else None,
    )
    session.flush()
    if _INSERT_SIGNAL.execute(session, values) == 0:
        return None
    return record


def _by_delivery(session: Session, provider: str, delivery_id: str) -> SignalRecord | None:
    session.flush()
    row = _BY_DELIVERY.first(session, {"b_provider": provider, "b_delivery_id": delivery_id})
    if row is None:
        return None
    return _record(dict(zip(_SIGNAL_FIELDS, row, strict=True)))


def _dedupe_key_taken(session: Session, dedupe_key: str) -> bool:
    return _DEDUPE_KEY_TAKEN.first(session, {"b_key": dedupe_key}) is not None


def _to_attempt(row: RouteAttemptRow) -> RouteAttempt:
    return RouteAttempt(
        signal_id=SignalId(row.signal_id),
        attempt=row.attempt,
        target_task_id=TaskId(row.target_task_id) if row.target_task_id else None,
        idempotency_key=row.idempotency_key,
        outcome=row.outcome,
        created_at=row.created_at,
    )


def _decision(signal_id: str, value: str) -> Decision:
    """A stored decision read back; one this version does not know is refused here."""
    for decision in _DECISIONS:
        if decision == value:
            return decision
    raise ValueError(f"signal {signal_id} has unknown decision {value!r}")


def _fit(text: str | None, limit: int) -> str | None:
    return text if text is None or len(text) <= limit else text[: limit - 1] + "…"
