"""POST /api/tasks and POST /api/tasks/{id}/messages over real HTTP on a real database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from adapters.config import ServerConfig
from adapters.emulators.server import serve
from adapters.web.api import TaskDesk, build_api
from adapters.web.auth import AdminAuth
from adapters.web.ui import build_ui
from runtime.store import mailbox, views
from runtime.store.records import Task, TaskResult, TaskStatus
from tests.harness import Stack, build_stack

TOKEN = "s3cret-admin"
SERVER = ServerConfig.model_validate({"host": "0.0.0.0", "admin_token": TOKEN})
REPO = "acme/widgets"


def desk_app(stack: Stack, server: ServerConfig) -> tuple[FastAPI, TaskDesk]:
    desk = TaskDesk(
        stack.scheduler,
        agents=("default", "reviewer"),
        default_agent="default",
        repo_known=lambda repo: repo == REPO,
    )
    auth = AdminAuth(server)
    app = FastAPI()
    app.include_router(build_api(stack.db, stack.scheduler, auth=auth.api, desk=desk))
    app.include_router(build_ui(stack.db, auth=auth.ui, desk=desk))
    return app, desk


@pytest.fixture
def stack(db_url: str, tmp_path: Path) -> Iterator[Stack]:
    built = build_stack(db_url, tmp_path, {"scripts": [{"turns": [{"say": "done"}]}]})
    yield built
    built.db.close()


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    app, _ = desk_app(stack, SERVER)
    with serve(app) as running:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=running.url, headers=headers, timeout=10) as http:
            yield http


async def _all_tasks(stack: Stack) -> list[Task]:
    return list((await stack.db.read(lambda s: views.list_tasks(s, limit=50))).tasks)


async def test_one_task_per_idempotency_key_when_posted_again_and_concurrently(
    stack: Stack, client: httpx.AsyncClient
) -> None:
    body = {"text": "fix the failing test", "repo": REPO, "agent": "reviewer"}
    key = {"Idempotency-Key": "k-1"}
    answers = await asyncio.gather(
        *(client.post("/api/tasks", json=body, headers=key) for _ in range(4))
    )
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 201]
    [task_id] = {a.json()["task_id"] for a in answers}
    first = next(a.json() for a in answers if a.status_code == 201)
    assert first["api_url"] == f"/api/tasks/{task_id}" and first["ui_url"] == f"/ui/tasks/{task_id}"
    [task] = await _all_tasks(stack)
    assert (task.task_id, task.status, task.agent, task.repo) == (
        task_id, TaskStatus.queued, "reviewer", REPO
    )
    shown = (await client.get(f"/api/tasks/{task_id}")).json()
    assert [(s["provider"], s["delivery_id"]) for s in shown["signals"]] == [("api", "k-1")]

    other = await client.post("/api/tasks", json={"text": "something else"},
                              headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 409 and task_id in other.json()["detail"]
    second = await client.post("/api/tasks", json={"text": "another"},
                               headers={"Idempotency-Key": "k-2"})
    assert second.status_code == 201 and second.json()["task_id"] != task_id
    assert (await _all_tasks(stack))[0].agent == "default"


@pytest.mark.parametrize(
    ("body", "headers", "status", "reason"),
    [
        ({"text": "x", "agent": "ghost"}, {"Idempotency-Key": "a"}, 400, "unknown agent 'ghost'"),
        ({"text": "x", "repo": "evil/repo"}, {"Idempotency-Key": "b"}, 400, "unknown repository"),
        ({"text": "x"}, {}, 422, "Idempotency-Key"),
        ({"text": ""}, {"Idempotency-Key": "c"}, 422, "text"),
        ({"text": "x"}, {"Idempotency-Key": "d", "Authorization": "Bearer wrong"}, 401, "token"),
    ],
)
async def test_bad_request_is_refused_with_reason_and_creates_nothing(
    stack: Stack,
    client: httpx.AsyncClient,
    body: dict[str, str],
    headers: dict[str, str],
    status: int,
    reason: str,
) -> None:
    answer = await client.post("/api/tasks", json=body, headers=headers)
    assert answer.status_code == status
    assert reason in str(answer.json()["detail"])
    assert await _all_tasks(stack) == []


async def test_follow_up_lands_in_mailbox_once_per_key(
    stack: Stack, client: httpx.AsyncClient
) -> None:
    made = await client.post("/api/tasks", json={"text": "go"}, headers={"Idempotency-Key": "t"})
    task_id = made.json()["task_id"]
    url = f"/api/tasks/{task_id}/messages"
    sent = await client.post(url, json={"text": "only Safari"}, headers={"Idempotency-Key": "m1"})
    again = await client.post(url, json={"text": "only Safari"}, headers={"Idempotency-Key": "m1"})
    assert (sent.status_code, again.status_code) == (201, 200)
    assert sent.json()["message_id"] == again.json()["message_id"]
    clash = await client.post(url, json={"text": "changed"}, headers={"Idempotency-Key": "m1"})
    assert clash.status_code == 409
    [message] = await stack.db.read(lambda s: mailbox.messages_after(s, task_id, 0))
    assert message.text.startswith("only Safari") and message.author == "api"

    missing = await client.post("/api/tasks/nope/messages", json={"text": "x"},
                                headers={"Idempotency-Key": "m2"})
    assert missing.status_code == 404
    await stack.scheduler.transact(
        stack.scheduler.request_cancel, task_id, reason="test", requested_by="t"
    )
    await stack.scheduler.transact(
        stack.scheduler.report_result, task_id, TaskResult(TaskStatus.canceled, "stopped")
    )
    late = await client.post(url, json={"text": "more"}, headers={"Idempotency-Key": "m3"})
    assert late.status_code == 409 and "already canceled" in late.json()["detail"]
    assert len(await stack.db.read(lambda s: mailbox.messages_after(s, task_id, 0))) == 1


async def test_ui_and_api_actions_refuse_another_sites_page_and_change_nothing(
    stack: Stack, client: httpx.AsyncClient
) -> None:
    made = await client.post("/api/tasks", json={"text": "go"}, headers={"Idempotency-Key": "o"})
    task_id = made.json()["task_id"]
    evil = {"Origin": "http://evil.example", "Idempotency-Key": "e"}
    stop = await client.post(f"/ui/tasks/{task_id}/stop", headers=evil)
    create = await client.post("/ui/tasks", json={"text": "x"}, headers=evil)
    # The API's own POSTs too: its cancel takes no body or header, so a page could send it.
    cancel = await client.post(f"/api/tasks/{task_id}/cancel", headers=evil)
    message = await client.post(f"/api/tasks/{task_id}/messages", json={"text": "x"}, headers=evil)
    assert (stop.status_code, create.status_code) == (403, 403)
    assert (cancel.status_code, message.status_code) == (403, 403)
    assert "cross-site request" in stop.json()["detail"]
    [task] = await _all_tasks(stack)
    assert task.cancel_requested_at is None
    own = {"Origin": str(client.base_url).rstrip("/")}
    assert (await client.post(f"/ui/tasks/{task_id}/stop", headers=own)).status_code == 202
