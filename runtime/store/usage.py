"""Model usage records: one row per model call, summed per task and per task tree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, case, func, select
from sqlalchemy.orm import Session

from runtime.store.inserts import insert_ignoring, parameters
from runtime.store.models import ModelCallRow

_ADD_CALL = insert_ignoring(
    cast(Table, ModelCallRow.__table__),
    [
        "task_id", "root_id", "call_key", "purpose", "model", "prompt_tokens",
        "completion_tokens", "cached_tokens", "cost_usd", "seconds", "created_at",
    ],
    ["task_id", "call_key"],
)


@dataclass(frozen=True, slots=True)
class ModelCall:
    call_key: str
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float
    seconds: float


@dataclass(frozen=True, slots=True)
class UsageTotals:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    turns: int = 0  # calls for the agent's next step, as opposed to compactions

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, int | float]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "turns": self.turns,
        }


def record_call(
    session: Session, task_id: str, root_id: str, call: ModelCall, now: datetime
) -> None:
    """Record ``call`` once: the same call key of a task is not counted twice."""
    values = dict(
        task_id=task_id,
        root_id=root_id,
        call_key=call.call_key,
        purpose=call.purpose,
        model=call.model,
        prompt_tokens=call.prompt_tokens,
        completion_tokens=call.completion_tokens,
        cached_tokens=call.cached_tokens,
        cost_usd=call.cost_usd,
        seconds=call.seconds,
        created_at=now,
    )
    _ADD_CALL.execute(session, parameters(values))


_SUMS = (
    func.count(ModelCallRow.model_call_id),
    func.coalesce(func.sum(ModelCallRow.prompt_tokens), 0),
    func.coalesce(func.sum(ModelCallRow.completion_tokens), 0),
    func.coalesce(func.sum(ModelCallRow.cached_tokens), 0),
    func.coalesce(func.sum(ModelCallRow.cost_usd), 0.0),
    func.coalesce(func.sum(case((ModelCallRow.purpose == "turn", 1), else_=0)), 0),
)


def _totals(row: Sequence[Any] | None) -> UsageTotals:
    if row is None:
        return UsageTotals()
    calls, prompt, completion, cached, cost, turns = row
    return UsageTotals(
        int(calls), int(prompt), int(completion), int(cached), float(cost), int(turns)
    )


def task_totals(session: Session, task_id: str, *, since: datetime | None = None) -> UsageTotals:
    """The task's calls; with ``since``, only those recorded from then on."""
    query = select(*_SUMS).where(ModelCallRow.task_id == task_id)
    if since is not None:
        query = query.where(ModelCallRow.created_at >= since)
    row = session.execute(query).first()
    return _totals(tuple(row) if row is not None else None)


def tree_totals(session: Session, root_id: str, *, since: datetime | None = None) -> UsageTotals:
    """Every call of the tree; with ``since``, only those recorded from then on."""
    query = select(*_SUMS).where(ModelCallRow.root_id == root_id)
    if since is not None:
        query = query.where(ModelCallRow.created_at >= since)
    row = session.execute(query).first()
    return _totals(tuple(row) if row is not None else None)


def calls_of(session: Session, task_id: str) -> list[ModelCall]:
    rows = session.scalars(
        select(ModelCallRow)
        .where(ModelCallRow.task_id == task_id)
        .order_by(ModelCallRow.model_call_id)
    )
    return [
        ModelCall(
            r.call_key, r.purpose, r.model, r.prompt_tokens, r.completion_tokens,
            r.cached_tokens, r.cost_usd, r.seconds,
        )
        for r in rows
    ]


def tokens_by_kind(session: Session) -> dict[str, int]:
    """All tokens ever recorded, by kind (prompt, completion, cached): for /metrics."""
    totals = _totals(tuple(session.execute(select(*_SUMS)).one()))
    return {
        "prompt": totals.prompt_tokens,
        "completion": totals.completion_tokens,
        "cached": totals.cached_tokens,
    }


@dataclass(frozen=True, slots=True)
class Spent:
    """What a task's model calls used: its own, its tree's, and each of its calls."""

    task: UsageTotals
    tree: UsageTotals
    calls: tuple[ModelCall, ...]


def spent_of(session: Session, task_id: str, root_id: str) -> Spent:
    return Spent(
        task_totals(session, task_id),
        tree_totals(session, root_id),
        tuple(calls_of(session, task_id)),
    )
