"""Deliveries: the tokens that make a task runnable at a time, each consumed by one worker.

A task gets one when it is scheduled, woken, stopped, recovered or given its next tick; a
claim consumes one with a single conditional update, so exactly one worker wins it.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Integer, Table, bindparam, select, update
from sqlalchemy.orm import Session

from runtime.ids import new_token
from runtime.store import owners
from runtime.store.models import DeliveryRow, UtcDateTime
from runtime.store.prepared import Prepared

_INSERT_DELIVERY = Prepared(
    cast(Table, DeliveryRow.__table__).insert().values(
        task_id=bindparam("b_task_id"), token=bindparam("b_token"), reason=bindparam("b_reason"),
        available_at=bindparam("b_available_at"), created_at=bindparam("b_now"),
    )
)


def add_delivery(
    session: Session, task_id: str, reason: str, available_at: datetime, now: datetime
) -> str:
    token = new_token()
    params = {
        "b_task_id": task_id, "b_token": token, "b_reason": reason,
        "b_available_at": available_at, "b_now": now,
    }
    _INSERT_DELIVERY.execute(session, params)
    return token


_DELIVERIES = cast(Table, DeliveryRow.__table__)
_CONSUME = Prepared(
    update(_DELIVERIES)
    .where(
        _DELIVERIES.c.token == bindparam("b_token"),
        _DELIVERIES.c.consumed_at.is_(None),
        _DELIVERIES.c.available_at <= bindparam("b_now", type_=UtcDateTime),
    )
    .values(consumed_at=bindparam("b_now", type_=UtcDateTime), consumed_by=bindparam("b_worker"))
    .returning(_DELIVERIES.c.task_id)
)
_READY = (
    select(_DELIVERIES.c.token)
    .where(
        _DELIVERIES.c.consumed_at.is_(None),
        _DELIVERIES.c.available_at <= bindparam("b_now", type_=UtcDateTime),
    )
    .order_by(_DELIVERIES.c.available_at, _DELIVERIES.c.id)
    .limit(bindparam("b_limit", type_=Integer))
)
_NEXT_READY = Prepared(_READY)
_NEXT_READY_SKIPPING_LOCKED = Prepared(_READY.with_for_update(skip_locked=True))
# What a machine may claim: not the tasks whose workspace a live machine other than it holds.
_READY_HERE = _READY.where(~owners.held_elsewhere())
_NEXT_READY_HERE = Prepared(_READY_HERE)
_NEXT_READY_HERE_SKIPPING_LOCKED = Prepared(
    _READY_HERE.with_for_update(skip_locked=True, of=_DELIVERIES)
)


def consume_delivery(session: Session, token: str, worker: str, now: datetime) -> str | None:
    """Atomically consume an available, unconsumed delivery; the task id if this call won."""
    row = _CONSUME.first(session, {"b_token": token, "b_now": now, "b_worker": worker})
    return None if row is None else str(row[0])


def next_ready_tokens(
    session: Session, now: datetime, limit: int, skip_locked: bool, machine: str | None = None
) -> list[str]:
    """The oldest ready deliveries; with ``machine``, only those it may claim (see
    ``runtime.store.owners``)."""
    if machine is None:
        ready = _NEXT_READY_SKIPPING_LOCKED if skip_locked else _NEXT_READY
        return [row[0] for row in ready.rows(session, {"b_now": now, "b_limit": limit})]
    here = _NEXT_READY_HERE_SKIPPING_LOCKED if skip_locked else _NEXT_READY_HERE
    params = {"b_now": now, "b_limit": limit, "b_machine": machine}
    return [row[0] for row in here.rows(session, params)]
