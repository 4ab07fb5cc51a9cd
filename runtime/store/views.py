"""Read models for operators: the task list, one task's page, and the counts behind /metrics.

Every query of one task's page goes through an index on the task (or its root): the tree by
``root_id``, transcript and tool calls and mailbox by ``task_id``, evidence by ``root_id``,
signals by ``task_id``. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from runtime.evidence import Strength
from runtime.execution import RunState
from runtime.store import ledger, mailbox, outbox, tool_calls, transcripts
from runtime.store import tasks as q
from runtime.store.models import ExecutionRow, SignalRow, TaskRow, ToolCallRow
from runtime.store.outbox import Unreadable
from runtime.store.records import SignalActor, StatusChange, Task, TaskStatus
from runtime.threads import Landed, ThreadRef

MAX_PAGE = 200


@dataclass(frozen=True, slots=True)
class TaskPage:
    """Newest first; ``next_before`` is the cursor for the following page, if there is one."""

    tasks: tuple[Task, ...]
    next_before: str | None


@dataclass(frozen=True, slots=True)
class ExecutionView:
    phase: str
    turn: int
    mailbox_position: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    version: int
    updated_at: datetime
    error: str | None


@dataclass(frozen=True, slots=True)
class MailboxView:
    message_id: str
    seq: int
    author: str | None
    text: str
    delivered_at: datetime
    incorporated_at: datetime | None  # when its ``mbx:`` transcript item was written


@dataclass(frozen=True, slots=True)
class EvidenceView:
    task_id: str
    call_id: str | None
    kind: str
    ref: str
    strength: str
    strength_rank: int
    detail: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class OutboxView:
    purpose: outbox.PostPurpose
    surface: str
    action: outbox.PostAction
    state: outbox.PostState
    attempts: int
    thread_ref: ThreadRef | Unreadable
    landed_on: Landed | Unreadable | None
    landed_at: datetime | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class SignalView:
    signal_id: str
    provider: str
    delivery_id: str
    kind: str
    decision: str
    reason: str | None
    actor: SignalActor | None
    text: str
    received_at: datetime


@dataclass(frozen=True, slots=True)
class TaskDetail:
    task: Task
    tree: tuple[Task, ...]  # the root and its descendants, depth first
    timeline: tuple[StatusChange, ...]
    execution: ExecutionView | None
    transcript: tuple[transcripts.TranscriptEntry, ...]
    tool_calls: tuple[tool_calls.ToolCallRecord, ...]
    mailbox: tuple[MailboxView, ...]
    evidence: tuple[EvidenceView, ...]
    outbox: tuple[OutboxView, ...]
    signals: tuple[SignalView, ...]


@dataclass(frozen=True, slots=True)
class Counts:
    signals_by_decision: dict[str, int]
    tasks_by_status: dict[str, int]
    tool_outcomes: dict[str, int]
    outbox_undelivered: int = 0


def list_tasks(
    session: Session,
    *,
    status: TaskStatus | None = None,
    limit: int = 50,
    before: str | None = None,
) -> TaskPage:
    """One page of tasks, newest first; ``before`` is a task id from the previous page."""
    limit = max(1, min(limit, MAX_PAGE))
    query = select(TaskRow)
    if status is not None:
        query = query.where(TaskRow.status == status.value)
    if before is not None:
        anchor = session.get(TaskRow, before)
        if anchor is None:
            return TaskPage((), None)
        query = query.where(_older_than(anchor))
    query = query.order_by(TaskRow.created_at.desc(), TaskRow.task_id.desc()).limit(limit + 1)
    rows = list(session.scalars(query))
    page = tuple(q.to_task(r) for r in rows[:limit])
    return TaskPage(page, page[-1].task_id if len(rows) > limit else None)


def _older_than(anchor: TaskRow) -> Any:
    # (created_at, id) ordering, so tasks created in the same microsecond are not skipped.
    return or_(
        TaskRow.created_at < anchor.created_at,
        (TaskRow.created_at == anchor.created_at) & (TaskRow.task_id < anchor.task_id),
    )


def task_detail(session: Session, task_id: str) -> TaskDetail | None:
    task = q.get_task(session, task_id)
    if task is None:
        return None
    entries = tuple(transcripts.transcript(session, task_id))
    return TaskDetail(
        task=task,
        tree=_tree(session, task.root_id),
        timeline=tuple(q.status_history(session, task_id)),
        execution=_execution(session, task_id),
        transcript=entries,
        tool_calls=tuple(tool_calls.all_calls(session, task_id)),
        mailbox=_mailbox(session, task_id, entries),
        evidence=tuple(_evidence_view(e) for e in ledger.evidence_of_tree(session, task.root_id)),
        outbox=tuple(_outbox_view(p) for p in outbox.posts_of_task(session, task_id)),
        signals=_signals(session, task_id),
    )


def _tree(session: Session, root_id: str) -> tuple[Task, ...]:
    rows = session.scalars(
        select(TaskRow).where(TaskRow.root_id == root_id).order_by(TaskRow.created_at)
    )
    children: dict[str | None, list[Task]] = {}
    for r in rows:
        children.setdefault(r.parent_id, []).append(q.to_task(r))
    ordered: list[Task] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        node = stack.pop()
        ordered.append(node)
        stack.extend(reversed(children.get(node.task_id, [])))
    return tuple(ordered)


def _execution(session: Session, task_id: str) -> ExecutionView | None:
    row = session.get(ExecutionRow, task_id)
    if row is None:
        return None
    error = RunState.from_json(row.state).error
    return ExecutionView(
        row.phase,
        row.turn,
        row.mailbox_position,
        row.lease_owner,
        row.lease_expires_at,
        row.version,
        row.updated_at,
        error.message if error is not None else None,
    )


def _mailbox(
    session: Session, task_id: str, entries: tuple[transcripts.TranscriptEntry, ...]
) -> tuple[MailboxView, ...]:
    written = {e.item_key: e.created_at for e in entries}
    return tuple(
        MailboxView(
            message_id=m.message_id,
            seq=m.seq,
            author=m.author,
            text=m.text,
            delivered_at=m.created_at,
            incorporated_at=written.get(f"mbx:{m.message_id}"),  # executor's mailbox item key
        )
        for m in mailbox.messages_after(session, task_id, 0)
    )


def _evidence_view(record: ledger.EvidenceRecord) -> EvidenceView:
    item = record.item
    return EvidenceView(
        task_id=record.task_id,
        call_id=record.call_id,
        kind=item.kind,
        ref=item.ref,
        strength=Strength(item.strength).name,
        strength_rank=int(item.strength),
        detail=dict(item.detail),
        created_at=record.created_at,
    )


def _outbox_view(post: outbox.OutboxPost) -> OutboxView:
    return OutboxView(
        post.purpose,
        post.surface,
        post.action,
        post.state,
        post.attempts,
        post.thread_ref,
        post.landed_on,
        post.landed_at,
        post.last_error,
    )


def _signals(session: Session, task_id: str) -> tuple[SignalView, ...]:
    rows = session.scalars(
        select(SignalRow).where(SignalRow.task_id == task_id).order_by(SignalRow.received_at)
    )
    return tuple(
        SignalView(
            r.signal_id,
            r.provider,
            r.delivery_id,
            r.kind,
            r.decision,
            r.reason,
            SignalActor.from_json(r.actor),
            r.text,
            r.received_at,
        )
        for r in rows
    )


def counts(session: Session) -> Counts:
    """Aggregates for a scrape: one grouped query per family."""
    return Counts(
        signals_by_decision=_grouped(session, SignalRow.decision),
        tasks_by_status=_grouped(session, TaskRow.status),
        tool_outcomes=_grouped(session, ToolCallRow.outcome, missing="unsettled"),
        outbox_undelivered=outbox.count_undelivered(session),
    )


def _grouped(session: Session, column: Any, missing: str = "none") -> dict[str, int]:
    rows = session.execute(select(column, func.count()).group_by(column))
    return {missing if value is None else str(value): int(n) for value, n in rows}
