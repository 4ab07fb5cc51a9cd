"""The operator JSON API: list tasks, read one task's whole page, create a task, send it a
follow-up, and request a stop.

Response models mirror the read models in ``runtime.store.views`` field for field, so the
served OpenAPI document describes exactly what a response carries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from adapters.web.auth import same_origin
from runtime.scheduler import AlreadyTerminal, Appended, Duplicate, NotFound, Scheduler
from runtime.store import signals, tasks, views
from runtime.store.engine import Database, Transaction
from runtime.store.records import (
    MailboxMessage,
    SenderPart,
    SignalActor,
    Task,
    TaskSpec,
    TaskStatus,
    TextPart,
    actor_json,
)
from runtime.store.usage import Spent, spent_of

Auth = Callable[[Request], Awaitable[None]]


# A thread reference (or where a post landed) leaves as the text it is stored as.
ThreadText = Annotated[str | None, BeforeValidator(lambda ref: None if ref is None else str(ref))]
RefText = Annotated[str, BeforeValidator(str)]
# A Signal's actor leaves in its stored form ({} for none).
ActorJson = Annotated[
    dict[str, Any],
    BeforeValidator(lambda a: actor_json(a) if a is None or isinstance(a, SignalActor) else a),
]


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True, frozen=True)


class TaskOut(_Out):
    task_id: str
    root_id: str
    parent_id: str | None
    depth: int
    agent: str
    status: TaskStatus
    message: str
    origin_thread_ref: ThreadText
    objective_key: str | None
    repo: str | None
    follows_task_id: str | None
    requested_by: str | None
    result: dict[str, Any] | None
    cancel_requested_at: datetime | None
    deadline_at: datetime | None
    created_at: datetime
    status_changed_at: datetime
    finished_at: datetime | None


class TaskPageOut(_Out):
    tasks: list[TaskOut]
    next_before: str | None


class StatusChangeOut(_Out):
    status: TaskStatus
    at: datetime


class ExecutionOut(_Out):
    phase: str
    turn: int
    mailbox_position: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    version: int
    updated_at: datetime
    error: str | None


class TranscriptEntryOut(_Out):
    seq: int
    item_key: str
    role: str
    kind: str
    payload: dict[str, Any]
    created_at: datetime


class ToolCallOut(_Out):
    call_id: str
    turn: int
    idx: int
    name: str
    args: dict[str, Any]
    effect: str
    dispatch_state: str
    handle: str | None
    outcome: str | None
    output: str | None
    is_error: bool
    dispatched_at: datetime | None
    settled_at: datetime | None
    duration_s: float | None
    late_reports: int
    interrupted: bool


class MailboxOut(_Out):
    message_id: str
    seq: int
    author: str | None
    text: str
    delivered_at: datetime
    incorporated_at: datetime | None


class EvidenceOut(_Out):
    task_id: str
    call_id: str | None
    kind: str
    ref: str
    strength: Literal["tool_reported", "provider_read_back", "verified"]
    strength_rank: int
    detail: dict[str, Any]
    created_at: datetime


class OutboxOut(_Out):
    purpose: str
    surface: str
    action: str
    state: str
    attempts: int
    thread_ref: RefText
    landed_on: ThreadText
    landed_at: datetime | None
    last_error: str | None


class SignalOut(_Out):
    signal_id: str
    provider: str
    delivery_id: str
    kind: str
    decision: str
    reason: str | None
    actor: ActorJson
    text: str
    received_at: datetime


class UsageOut(_Out):
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    total_tokens: int
    cost_usd: float


class ModelCallOut(_Out):
    call_key: str
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float
    seconds: float


class TaskDetailOut(_Out):
    task: TaskOut
    tree: list[TaskOut]
    timeline: list[StatusChangeOut]
    execution: ExecutionOut | None
    transcript: list[TranscriptEntryOut]
    tool_calls: list[ToolCallOut]
    mailbox: list[MailboxOut]
    evidence: list[EvidenceOut]
    outbox: list[OutboxOut]
    signals: list[SignalOut]
    # The task's model calls and what they used: the task's own, and its whole tree's.
    usage: UsageOut | None = None
    tree_usage: UsageOut | None = None
    model_calls: list[ModelCallOut] = []


class CancelOut(_Out):
    task_id: str
    status: TaskStatus
    cancel_requested_at: datetime | None


class ErrorOut(_Out):
    detail: str


class NewTaskIn(BaseModel):
    """A task asked for through the API or the UI's New task form."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20000, description="what to do")
    repo: str | None = Field(None, description="a configured repository key (owner/name)")
    agent: str | None = Field(None, description="a configured agent; the default when left out")


class CreatedOut(_Out):
    task_id: str
    status: TaskStatus
    created: bool
    api_url: str
    ui_url: str


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20000)


class MessageOut(_Out):
    task_id: str
    message_id: str
    seq: int
    created: bool


IdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=150,
        description="one task (or message) per key: a repeat answers what the first made",
    ),
]


@dataclass(frozen=True, slots=True)
class Created:
    task: Task
    created: bool


class _Raced(Exception):
    """Another request stored the same key first: this transaction rolls back."""


class TaskDesk:
    """What the API and the UI ask of the scheduler for a person at the operator surface:
    a new task (once per idempotency key), a follow-up into a task's mailbox (once per key),
    a stop. Bad requests raise ``HTTPException`` with the reason and change nothing."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        agents: Collection[str],
        default_agent: str,
        repo_known: Callable[[str], bool],
        public_url: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.agents = frozenset(agents)
        self.default_agent = default_agent
        self.repo_known = repo_known
        self.public_url = (public_url or "").rstrip("/")

    def created_out(self, found: Created) -> CreatedOut:
        task = found.task
        return CreatedOut(
            task_id=task.task_id,
            status=task.status,
            created=found.created,
            api_url=f"{self.public_url}/api/tasks/{task.task_id}",
            ui_url=f"{self.public_url}/ui/tasks/{task.task_id}",
        )

    async def create(self, body: NewTaskIn, key: str, who: str) -> Created:
        agent = body.agent or self.default_agent
        if agent not in self.agents:
            known = ", ".join(sorted(self.agents))
            raise HTTPException(400, f"unknown agent {agent!r} (agents: {known})")
        if body.repo is not None and not self.repo_known(body.repo):
            raise HTTPException(
                400,
                f"unknown repository {body.repo!r}: name one in workspace.repositories, "
                "or a GitHub repository github.repositories admits",
            )
        spec = TaskSpec(
            agent=agent,
            message=body.text,
            objective_key=f"api:{key}",
            repo=body.repo,
            requested_by=who,
        )
        facts = signals.SignalFacts(
            provider="api",
            delivery_id=key,
            dedupe_key=f"api:{key}",
            kind="mention",
            thread_ref=None,
            objective_key=spec.objective_key,
            actor=SignalActor(id=who, name=who, is_bot=False, is_self=False),
            text=body.text,
            received_at=self.scheduler.clock.now(),
        )
        try:
            found = await self.scheduler.transact(self._create_in, spec, facts)
        except _Raced:
            found = await self.scheduler.transact(self._create_in, spec, facts)
        if not found.created and (
            found.task.message,
            found.task.repo,
            found.task.agent,
        ) != (body.text, body.repo, agent):
            raise HTTPException(
                409,
                f"Idempotency-Key {key!r} already made task {found.task.task_id} "
                "from a different request",
            )
        return found

    def _create_in(
        self, session: Transaction, spec: TaskSpec, facts: signals.SignalFacts
    ) -> Created:
        """The task and the request that made it (a Signal under the key), in one commit."""
        seen = signals.read_admission(session, facts, [])
        if isinstance(seen, signals.Redelivered):
            made = seen.record.task_id
            task = tasks.get_task(session, made) if made else None
            assert task is not None, f"api request {facts.delivery_id} made no task"
            return Created(task, created=False)
        task = self.scheduler.schedule(session, spec).task
        verdict = signals.Verdict("new_task", task_id=task.task_id)
        if signals.insert_signal(session, facts, seen, verdict) is None:
            raise _Raced(facts.delivery_id)
        return Created(task, created=True)

    async def follow_up(self, task_id: str, text: str, key: str, who: str) -> MessageOut:
        parts = (TextPart(text), SenderPart(provider="api", sender_id=who, name=who))
        outcome = await self.scheduler.transact(
            self.scheduler.append_mailbox, task_id, f"api:{key}", parts, who
        )
        match outcome:
            case Appended(message=message):
                return _message_out(message, created=True)
            case Duplicate(message=message):
                if message.text != text:
                    raise HTTPException(
                        409, f"Idempotency-Key {key!r} already sent a different message"
                    )
                return _message_out(message, created=False)
            case AlreadyTerminal(status=status):
                raise HTTPException(409, f"task {task_id} is already {status.value}")
            case NotFound():
                raise HTTPException(404, f"no task {task_id}")

    async def stop(self, task_id: str, who: str) -> Task:
        await _ensure_active(self.scheduler, task_id)
        if not await self.scheduler.transact(
            self.scheduler.request_cancel, task_id, reason=f"stopped by {who}", requested_by=who
        ):
            await _ensure_active(self.scheduler, task_id)  # it finished in between: say how
        task = await self.scheduler.get(task_id)
        assert task is not None
        return task


def _message_out(message: MailboxMessage, *, created: bool) -> MessageOut:
    return MessageOut(
        task_id=message.task_id, message_id=message.message_id, seq=message.seq, created=created
    )


_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut}}
_AUTH: dict[int | str, dict[str, Any]] = {401: {"model": ErrorOut}, 403: {"model": ErrorOut}}


_BAD: dict[int | str, dict[str, Any]] = {400: {"model": ErrorOut}, 409: {"model": ErrorOut}}


def build_api(
    db: Database, scheduler: Scheduler, *, auth: Auth, desk: TaskDesk | None = None
) -> APIRouter:
    router = APIRouter(prefix="/api", tags=["tasks"], dependencies=[Depends(auth)], responses=_AUTH)
    actions = [Depends(same_origin)]  # a page of another site never acts through a browser
    desk = desk or TaskDesk(
        scheduler, agents=("default",), default_agent="default", repo_known=lambda repo: False
    )

    @router.post(
        "/tasks",
        status_code=201,
        responses={**_BAD, 200: {"model": CreatedOut}},
        dependencies=actions,
    )
    async def create_task(
        body: NewTaskIn, response: Response, key: IdempotencyKey
    ) -> CreatedOut:
        """One task per ``Idempotency-Key``: 201 when it is made, 200 (the same task) for a
        repeat, 409 when the key made a task from a different request."""
        found = await desk.create(body, key, "api")
        if not found.created:
            response.status_code = 200
        return desk.created_out(found)

    @router.post(
        "/tasks/{task_id}/messages",
        status_code=201,
        responses={**_NOT_FOUND, **_BAD, 200: {"model": MessageOut}},
        dependencies=actions,
    )
    async def send_message(
        task_id: str, body: MessageIn, response: Response, key: IdempotencyKey
    ) -> MessageOut:
        """A follow-up into the task's mailbox, once per ``Idempotency-Key``; the task reads
        it before its next model call."""
        out = await desk.follow_up(task_id, body.text, key, "api")
        if not out.created:
            response.status_code = 200
        return out

    @router.get("/tasks")
    async def list_tasks(
        status: TaskStatus | None = None,
        limit: int = Query(50, ge=1, le=views.MAX_PAGE),
        before: str | None = Query(None, description="next_before of the previous page"),
    ) -> TaskPageOut:
        page = await db.read(
            lambda s: views.list_tasks(s, status=status, limit=limit, before=before)
        )
        return TaskPageOut.model_validate(page)

    @router.get("/tasks/{task_id}", responses=_NOT_FOUND)
    async def show_task(task_id: str) -> TaskDetailOut:
        found = await db.read(lambda s: _with_usage(s, task_id))
        if found is None:
            raise HTTPException(404, f"no task {task_id}")
        detail, spent = found
        out = TaskDetailOut.model_validate(detail)
        return out.model_copy(
            update={
                "usage": UsageOut.model_validate(spent.task.to_json()),
                "tree_usage": UsageOut.model_validate(spent.tree.to_json()),
                "model_calls": [ModelCallOut.model_validate(c) for c in spent.calls],
            }
        )

    @router.post(
        "/tasks/{task_id}/cancel",
        status_code=202,
        responses={**_NOT_FOUND, 409: {"model": ErrorOut}},
        dependencies=actions,
    )
    async def cancel_task(task_id: str) -> CancelOut:
        task = await desk.stop(task_id, "api")
        return CancelOut(
            task_id=task.task_id, status=task.status, cancel_requested_at=task.cancel_requested_at
        )

    return router


def _with_usage(session: Transaction, task_id: str) -> tuple[views.TaskDetail, Spent] | None:
    detail = views.task_detail(session, task_id)
    if detail is None:
        return None
    return detail, spent_of(session, detail.task.task_id, detail.task.root_id)


async def _ensure_active(scheduler: Scheduler, task_id: str) -> None:
    task = await scheduler.get(task_id)
    if task is None:
        raise HTTPException(404, f"no task {task_id}")
    if task.status.is_terminal:
        raise HTTPException(409, f"task {task_id} is already {task.status.value}")
