"""The ORM schema. Only runtime/store sees these classes; everything else gets domain records.

Uniqueness that the design depends on lives here as constraints, never as check-then-insert:
(provider, delivery_id) and dedupe_key on signals, (parent_id, child_key) on tasks,
(task_id, idempotency_key) and (task_id, seq) on mailbox messages, (task_id, item_key) on
transcript items, (task_id, call_id) on tool calls, and the idempotency key of each outbox post.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import Float, TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """Stores naive UTC, returns aware UTC: the same on SQLite and PostgreSQL."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT.
AutoId = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON


class Base(DeclarativeBase):
    pass


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("parent_id", "child_key", name="uq_tasks_parent_child_key"),
        Index("ix_tasks_objective_status", "objective_key", "status"),
        Index("ix_tasks_status", "status"),
        Index("ix_tasks_root", "root_id"),
        Index("ix_tasks_deadline", "deadline_at"),
        Index("ix_tasks_created", "created_at", "id"),
        Index("ix_tasks_status_created", "status", "created_at", "id"),
    )
    task_id: Mapped[str] = mapped_column("id", String(40), primary_key=True)
    root_id: Mapped[str] = mapped_column(String(40))
    parent_id: Mapped[str | None] = mapped_column(String(40))
    child_key: Mapped[str | None] = mapped_column(String(200))
    depth: Mapped[int] = mapped_column(Integer, default=0)
    agent: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    message: Mapped[str] = mapped_column(Text)
    origin_thread_ref: Mapped[str | None] = mapped_column(String(300))
    objective_key: Mapped[str | None] = mapped_column(String(300))
    repo: Mapped[str | None] = mapped_column(String(200))
    follows_task_id: Mapped[str | None] = mapped_column(String(40))
    requested_by: Mapped[str | None] = mapped_column(String(200))
    result: Mapped[dict[str, Any] | None] = mapped_column(Json)
    mailbox_seq: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    cancel_reason: Mapped[str | None] = mapped_column(Text)
    cancel_requested_by: Mapped[str | None] = mapped_column(String(200))
    deadline_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    status_changed_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class TaskStatusChangeRow(Base):
    __tablename__ = "task_status_changes"
    __table_args__ = (Index("ix_status_changes_task", "task_id"),)
    change_id: Mapped[int] = mapped_column("id", AutoId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20))
    at: Mapped[datetime] = mapped_column(UtcDateTime)


class DeliveryRow(Base):
    __tablename__ = "deliveries"
    __table_args__ = (
        Index("ix_deliveries_ready", "consumed_at", "available_at"),
        Index("ix_deliveries_task", "task_id"),
    )
    delivery_id: Mapped[int] = mapped_column("id", AutoId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(40))
    token: Mapped[str] = mapped_column(String(64), unique=True)
    reason: Mapped[str] = mapped_column(String(40))
    available_at: Mapped[datetime] = mapped_column(UtcDateTime)
    consumed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    consumed_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ExecutionRow(Base):
    __tablename__ = "executions"
    __table_args__ = (Index("ix_executions_lease", "lease_expires_at"),)
    task_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    phase: Mapped[str] = mapped_column(String(40))
    turn: Mapped[int] = mapped_column(Integer, default=0)
    mailbox_position: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[dict[str, Any]] = mapped_column(Json)
    lease_id: Mapped[str | None] = mapped_column(String(64))
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    version: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class MailboxMessageRow(Base):
    __tablename__ = "mailbox_messages"
    __table_args__ = (
        UniqueConstraint("task_id", "idempotency_key", name="uq_mailbox_task_key"),
        UniqueConstraint("task_id", "seq", name="uq_mailbox_task_seq"),
    )
    message_id: Mapped[str] = mapped_column("id", String(40), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(40))
    seq: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str] = mapped_column(String(300))
    parts: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    author: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class TranscriptItemRow(Base):
    __tablename__ = "transcript_items"
    __table_args__ = (UniqueConstraint("task_id", "item_key", name="uq_transcript_task_item"),)
    item_seq: Mapped[int] = mapped_column("id", AutoId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(40))
    item_key: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))
    kind: Mapped[str] = mapped_column(String(20))
    payload: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ToolCallRow(Base):
    __tablename__ = "tool_calls"
    __table_args__ = (Index("ix_tool_calls_turn", "task_id", "turn"),)
    task_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    call_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    turn: Mapped[int] = mapped_column(Integer)
    idx: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(100))
    args: Mapped[dict[str, Any]] = mapped_column(Json)
    effect: Mapped[str] = mapped_column(String(10))
    dispatch_state: Mapped[str] = mapped_column(String(20))
    handle: Mapped[str | None] = mapped_column(String(200))
    deadline_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    outcome: Mapped[str | None] = mapped_column(String(20))
    result: Mapped[dict[str, Any] | None] = mapped_column(Json)
    dispatched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    settled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    late_reports: Mapped[int] = mapped_column(Integer, default=0)


class EvidenceRow(Base):
    __tablename__ = "evidence"
    __table_args__ = (
        UniqueConstraint("task_id", "kind", "ref", name="uq_evidence_task_kind_ref"),
        Index("ix_evidence_root", "root_id"),
    )
    evidence_id: Mapped[int] = mapped_column("id", AutoId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(40))
    root_id: Mapped[str] = mapped_column(String(40))
    call_id: Mapped[str | None] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))
    ref: Mapped[str] = mapped_column(String(300))
    strength: Mapped[int] = mapped_column(Integer)
    detail: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class OutboxRow(Base):
    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_pending", "state", "next_attempt_at"),
        Index("ix_outbox_task", "task_id"),
        # A reaction or click names a message by where it landed: find its task.
        Index("ix_outbox_landed_on", "landed_on"),
    )
    outbox_id: Mapped[int] = mapped_column("id", AutoId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(40))
    purpose: Mapped[str] = mapped_column(String(40))
    surface: Mapped[str] = mapped_column(String(40))
    thread_ref: Mapped[str] = mapped_column(String(300))
    idempotency_key: Mapped[str] = mapped_column(String(300), unique=True)
    action: Mapped[str] = mapped_column(String(20))
    body: Mapped[str] = mapped_column(Text)
    # Buttons offered with the post (e.g. Stop), as runtime.surfaces.Action values.
    actions: Mapped[list[dict[str, Any]] | None] = mapped_column(Json)
    state: Mapped[str] = mapped_column(String(20))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    landed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    landed_on: Mapped[str | None] = mapped_column(String(300))
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class SignalRow(Base):
    __tablename__ = "signals"
    __table_args__ = (
        UniqueConstraint("provider", "delivery_id", name="uq_signals_provider_delivery"),
        UniqueConstraint("dedupe_key", name="uq_signals_dedupe_key"),
        Index("ix_signals_task", "task_id"),
        Index("ix_signals_decision_received", "decision", "received_at"),
        # A linked pull request's CI follow-ups are counted per objective.
        Index("ix_signals_objective_kind", "objective_key", "kind"),
    )
    signal_id: Mapped[str] = mapped_column("id", String(40), primary_key=True)
    provider: Mapped[str] = mapped_column(String(20))
    delivery_id: Mapped[str] = mapped_column(String(200))
    dedupe_key: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(30))
    thread_ref: Mapped[str | None] = mapped_column(String(300))
    objective_key: Mapped[str | None] = mapped_column(String(300))
    actor: Mapped[dict[str, Any]] = mapped_column(Json)
    text: Mapped[str] = mapped_column(Text)
    decision: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(String(200))
    task_id: Mapped[str | None] = mapped_column(String(40))
    received_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # While pending: the route to carry out, as routing serialised it.
    plan: Mapped[dict[str, Any] | None] = mapped_column(Json)
    # The message itself inside its thread, and its link: what the task brief starts from.
    message_ref: Mapped[str | None] = mapped_column(String(300))
    url: Mapped[str | None] = mapped_column(Text)


class RouteAttemptRow(Base):
    __tablename__ = "route_attempts"
    __table_args__ = (Index("ix_route_attempts_signal", "signal_id"),)
    attempt_id: Mapped[int] = mapped_column("id", AutoId, primary_key=True, autoincrement=True)
    signal_id: Mapped[str] = mapped_column(String(40))
    attempt: Mapped[int] = mapped_column(Integer)
    target_task_id: Mapped[str | None] = mapped_column(String(40))
    idempotency_key: Mapped[str] = mapped_column(String(300))
    outcome: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class InstallationRow(Base):
    """A provider installation (a Slack workspace's bot or installer), sealed: ``sealed``
    is ciphertext the adapter made; the store never sees a token in the clear."""

    __tablename__ = "installations"
    __table_args__ = (
        # "" stands for "none" so that uniqueness holds (NULLs never collide).
        UniqueConstraint(
            "provider", "enterprise_id", "team_id", "kind", "user_id", name="uq_installations"
        ),
    )
    installation_id: Mapped[int] = mapped_column(
        "id", AutoId, primary_key=True, autoincrement=True
    )
    provider: Mapped[str] = mapped_column(String(20))
    enterprise_id: Mapped[str] = mapped_column(String(40))
    team_id: Mapped[str] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(20))  # bot | installation
    user_id: Mapped[str] = mapped_column(String(40))
    sealed: Mapped[str] = mapped_column(Text)
    installed_at: Mapped[datetime] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class OAuthStateRow(Base):
    """An OAuth ``state`` handed to a browser, good once until it expires."""

    __tablename__ = "oauth_states"
    state: Mapped[str] = mapped_column(String(200), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class PullLinkRow(Base):
    """A pull request a task opened (or found), linked to the task's objective: its
    conversation, reviews and the CI of its current head route to that objective."""

    __tablename__ = "pull_links"
    __table_args__ = (Index("ix_pull_links_head", "repo", "head_sha"),)
    repo: Mapped[str] = mapped_column(String(200), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    objective_key: Mapped[str] = mapped_column(String(500))
    task_id: Mapped[str] = mapped_column(String(40))
    head_ref: Mapped[str] = mapped_column(String(300))
    head_sha: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class GitHubInboxRow(Base):
    """A GitHub delivery held while its asker's permission is looked up, off the request path."""

    __tablename__ = "github_inbox"
    __table_args__ = (Index("ix_github_inbox_next_at", "next_at"),)
    delivery_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    event: Mapped[str] = mapped_column(String(60))
    payload: Mapped[dict[str, Any]] = mapped_column(Json)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime)
    attempts: Mapped[int] = mapped_column(Integer)
    next_at: Mapped[datetime] = mapped_column(UtcDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)


class GitHubRedeliveryRow(Base):
    """A failed webhook delivery Keel asked GitHub to redeliver (once: the row says so)."""

    __tablename__ = "github_redeliveries"
    guid: Mapped[str] = mapped_column(String(200), primary_key=True)
    hook_id: Mapped[int] = mapped_column(BigInteger)  # the failed attempt asked for again
    delivered_at: Mapped[datetime] = mapped_column(UtcDateTime)
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ModelCallRow(Base):
    """One model call's usage, as the provider reported it; ``call_key`` names the call
    within its task (``turn:<n>`` or ``compact:<seq>``), so a call is counted once."""

    __tablename__ = "model_calls"
    __table_args__ = (
        UniqueConstraint("task_id", "call_key", name="uq_model_calls_task_call"),
        Index("ix_model_calls_root", "root_id"),
    )
    model_call_id: Mapped[int] = mapped_column("id", AutoId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(40))
    root_id: Mapped[str] = mapped_column(String(40))
    call_key: Mapped[str] = mapped_column(String(100))
    purpose: Mapped[str] = mapped_column(String(20))
    model: Mapped[str] = mapped_column(String(200))
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_usd: Mapped[float] = mapped_column(Float)
    seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class MachineRow(Base):
    """A machine's workspaces, and how long they count as alive: every worker with that
    machine identity renews the lease, and a task whose workspace lives on a machine whose
    lease passed may be taken over by another."""

    __tablename__ = "machines"
    machine_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    lease_expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    seen_at: Mapped[datetime] = mapped_column(UtcDateTime)


class WorkspaceOwnerRow(Base):
    """Which machine holds a task tree's workspace, and the latest snapshot of it that
    another machine could restore (``runtime.workspace.snapshots``). ``taken_from`` is set
    when a machine took the workspace over from one whose lease had passed, until the task
    has been told."""

    __tablename__ = "workspace_owners"
    root_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    machine_id: Mapped[str] = mapped_column(String(200))
    since: Mapped[datetime] = mapped_column(UtcDateTime)
    snapshot_sha: Mapped[str | None] = mapped_column(String(64))
    snapshot_tree: Mapped[str | None] = mapped_column(String(64))
    snapshot_turn: Mapped[int | None] = mapped_column(Integer)
    snapshot_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    taken_from: Mapped[str | None] = mapped_column(String(200))
