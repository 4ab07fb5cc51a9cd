"""The operator task UI: server-rendered pages over ``runtime.store.views``.

Jinja2 with autoescape on renders everything; a tiny script refreshes a page in place while
its task can still change. A token presented once as ``?token=`` is kept in a cookie so the
links, the refresh and the actions work without repeating it.

The actions (a New task form, a Stop button, a follow-up box) post JSON to ``/ui/...``, where
the cookie reaches (``SameSite=Strict``: another site's page cannot make a browser send it),
and ask the same ``TaskDesk`` as the API, under an ``Idempotency-Key`` the page makes per
submission so a repeated click makes nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, cast

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse

from adapters.spend import spend_text, with_spend
from adapters.web.api import (
    CancelOut,
    CreatedOut,
    IdempotencyKey,
    MessageIn,
    MessageOut,
    NewTaskIn,
    TaskDesk,
)
from adapters.web.auth import TOKEN_COOKIE, TOKEN_QUERY, cookie_is_secure, same_origin
from runtime.daemon_role import DaemonRole
from runtime.evidence import EvidenceItem, EvidenceKind, Strength
from runtime.reporting import describe_evidence
from runtime.store import tool_calls, views
from runtime.store.engine import Database
from runtime.store.records import Task, TaskStatus

Auth = Callable[[Request], Awaitable[None]]

_HERE = Path(__file__).resolve().parent
_STATIC = {
    "keel.css": "text/css",
    "refresh.js": "text/javascript",
    "actions.js": "text/javascript",
}
REFRESH_SECONDS = 3
_SUMMARY_CHARS = 160

STRENGTH_LABELS: Mapping[str, str] = {
    "tool_reported": "tool said",
    "provider_read_back": "read back from provider",
    "verified": "verified",
}


@dataclass(frozen=True, slots=True)
class MessageRow:
    row_type: Literal["message"]
    role: str
    kind: str
    text: str
    at: datetime


@dataclass(frozen=True, slots=True)
class ToolRow:
    """A tool call and its result: one row."""

    row_type: Literal["tool"]
    call: tool_calls.ToolCallRecord
    args_summary: str
    output_summary: str
    at: datetime


@dataclass(frozen=True, slots=True)
class DaemonBadge:
    """How a daemon's task shows itself: which role, and whether it waits for events."""

    daemon_id: str
    state: Literal["waiting", "working", "ended"]
    label: str


def daemon_badge(task: Task) -> DaemonBadge | None:
    role = DaemonRole.of(task.objective_key)
    if role is None:
        return None
    daemon_id = role.daemon_id
    if task.status.is_terminal:
        return DaemonBadge(daemon_id, "ended", "ended; the next event starts its successor")
    if task.status is TaskStatus.waiting:
        return DaemonBadge(daemon_id, "waiting", "waiting for events")
    return DaemonBadge(daemon_id, "working", "handling an event")


def transcript_rows(detail: views.TaskDetail) -> list[MessageRow | ToolRow]:
    calls = {c.call_id: c for c in detail.tool_calls}
    rows: list[MessageRow | ToolRow] = []
    for entry in detail.transcript:
        prefix, _, call_id = entry.item_key.partition(":")
        call = calls.get(call_id)
        if prefix == "result" and call is not None:
            continue  # shown on its call's row
        if prefix == "call" and call is not None:
            rows.append(
                ToolRow(
                    "tool", call, summarize_args(call.args), _clip(call.output), entry.created_at
                )
            )
            continue
        rows.append(
            MessageRow(
                "message", entry.role, entry.kind, _entry_text(entry.payload), entry.created_at
            )
        )
    return rows


def summarize_args(args: Mapping[str, Any]) -> str:
    return _clip(", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in args.items()))


def _entry_text(payload: Mapping[str, Any]) -> str:
    return str(payload.get("text", payload.get("output", "")))


def _clip(text: str | None) -> str:
    if text is None:
        return ""
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def evidence_line(view: views.EvidenceView) -> str:
    """The line a reply gives this evidence (a setup's outcome, a refused host, a test run)."""
    kind = cast(EvidenceKind, view.kind)
    item = EvidenceItem(kind, view.ref, Strength(view.strength_rank), view.detail)
    return describe_evidence(item)


def make_environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(_HERE / "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["seconds"] = _seconds
    env.filters["clip"] = _clip
    env.filters["spend"] = spend_text
    env.globals["strength_labels"] = STRENGTH_LABELS
    env.globals["evidence_line"] = evidence_line
    env.globals["daemon_badge"] = daemon_badge
    return env


def build_ui(
    db: Database, *, auth: Auth, public_url: str | None = None, desk: TaskDesk | None = None
) -> APIRouter:
    """The pages; with a ``desk``, also the New task form, the Stop button and the
    follow-up box (without one the pages only read)."""
    env = make_environment()
    env.globals["actions"] = desk is not None
    env.globals["agents"] = sorted(desk.agents) if desk is not None else []
    env.globals["default_agent"] = desk.default_agent if desk is not None else ""
    router = APIRouter(prefix="/ui", dependencies=[Depends(auth)], include_in_schema=False)

    def page(request: Request, template: str, **context: Any) -> HTMLResponse:
        html = env.get_template(template).render(**context)
        return _remember_token(request, HTMLResponse(html), public_url)

    @router.get("")
    async def home() -> RedirectResponse:
        return RedirectResponse("/ui/tasks")

    @router.get("/tasks")
    async def task_list(
        request: Request,
        status: TaskStatus | None = None,
        before: str | None = None,
        limit: int = Query(50, ge=1, le=views.MAX_PAGE),
    ) -> HTMLResponse:
        found = await db.read(
            lambda s: views.list_tasks(s, status=status, limit=limit, before=before)
        )
        return page(
            request,
            "tasks.html",
            page=found,
            status=status,
            statuses=list(TaskStatus),
            refresh=REFRESH_SECONDS,
        )

    @router.get("/tasks/{task_id}")
    async def task_page(request: Request, task_id: str) -> HTMLResponse:
        found = await db.read(lambda s: with_spend(s, task_id))
        if found is None:
            raise HTTPException(404, f"no task {task_id}")
        detail, spent = found
        live = not detail.task.status.is_terminal or (
            detail.execution is not None and detail.execution.phase != "done"
        )
        return page(
            request,
            "task.html",
            detail=detail,
            rows=transcript_rows(detail),
            spent=spent,
            refresh=REFRESH_SECONDS if live else None,
        )

    if desk is not None:
        _mount_actions(router, desk)

    @router.get("/static/{name}")
    async def static(name: str) -> FileResponse:
        if name not in _STATIC:
            raise HTTPException(404, f"no static file {name}")
        return FileResponse(_HERE / "static" / name, media_type=_STATIC[name])

    return router


def _mount_actions(router: APIRouter, desk: TaskDesk) -> None:
    actions = [Depends(same_origin)]

    @router.post("/tasks", status_code=201, dependencies=actions)
    async def new_task(body: NewTaskIn, response: Response, key: IdempotencyKey) -> CreatedOut:
        found = await desk.create(body, key, "ui")
        if not found.created:
            response.status_code = 200
        return desk.created_out(found)

    @router.post("/tasks/{task_id}/messages", status_code=201, dependencies=actions)
    async def follow_up(
        task_id: str, body: MessageIn, response: Response, key: IdempotencyKey
    ) -> MessageOut:
        out = await desk.follow_up(task_id, body.text, key, "ui")
        if not out.created:
            response.status_code = 200
        return out

    @router.post("/tasks/{task_id}/stop", status_code=202, dependencies=actions)
    async def stop(task_id: str) -> CancelOut:
        task = await desk.stop(task_id, "ui")
        return CancelOut(
            task_id=task.task_id, status=task.status, cancel_requested_at=task.cancel_requested_at
        )


def _remember_token(
    request: Request, response: HTMLResponse, public_url: str | None
) -> HTMLResponse:
    # Only reached after auth accepted the request, so a token in the query is the right one.
    token = request.query_params.get(TOKEN_QUERY)
    if token:
        response.set_cookie(
            TOKEN_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            path="/ui",
            secure=cookie_is_secure(request, public_url),
        )
    return response
