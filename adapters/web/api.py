"""The operator JSON API: list tasks, read one task's whole page, and request a stop.

Response models mirror the read models in ``runtime.store.views`` field for field, so the
served OpenAPI document describes exactly what a response carries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, BeforeValidator, ConfigDict

from runtime.scheduler import Scheduler
from runtime.store import views
from runtime.store.engine import Database, Transaction
from runtime.store.records import SignalActor, TaskStatus, actor_json
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


_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut}}
_AUTH: dict[int | str, dict[str, Any]] = {401: {"model": ErrorOut}, 403: {"model": ErrorOut}}


def build_api(db: Database, scheduler: Scheduler, *, auth: Auth) -> APIRouter:
    router = APIRouter(prefix="/api", tags=["tasks"], dependencies=[Depends(auth)], responses=_AUTH)

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
    )
    async def cancel_task(task_id: str) -> CancelOut:
        await _ensure_active(scheduler, task_id)
        if not await scheduler.transact(scheduler.request_cancel,
            task_id, reason="canceled from the API", requested_by="api"
        ):
            await _ensure_active(scheduler, task_id)  # it finished in between: say how
        task = await scheduler.get(task_id)
        assert task is not None
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
