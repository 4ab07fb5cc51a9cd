"""The UI's actions in headless Chromium: New task form, live progress, follow-up, Stop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from playwright.async_api import Browser

from adapters.emulators.server import serve
from adapters.web.api import TaskDesk, build_api
from adapters.web.auth import AdminAuth
from adapters.web.ui import build_ui
from runtime.store import mailbox, views
from runtime.store.records import TaskStatus
from tests.harness import Stack, build_stack
from tests.integration.test_task_ui_browser import browser
from tests.integration.test_web_api import EXPOSED

__all__ = ["browser"]  # the fixture, shared

FOLLOW_UP = "only on Safari please"
SCRIPT = {
    "scripts": [
        {
            "turns": [
                {"say": "starting on the widget", "tool_calls": [
                    {"name": "sleep", "args": {"seconds": 0.2}}
                ]},
                # Retried (a model waiting to see something) until the follow-up arrives.
                {"wait_seen": [FOLLOW_UP], "say": "noted: Safari only", "tool_calls": [
                    {"name": "sleep", "args": {"seconds": 0.1}}
                ]},
                {"wait_seen": ["a message nobody sends"], "say": "unreachable"},
            ]
        }
    ]
}


@pytest.fixture
def stack(db_url: str, tmp_path: Path) -> Iterator[Stack]:
    built = build_stack(db_url, tmp_path, SCRIPT)
    yield built
    built.db.close()


def _app(stack: Stack) -> FastAPI:
    desk = TaskDesk(
        stack.scheduler,
        agents=("default",),
        default_agent="default",
        repo_known=lambda repo: repo == "acme/widgets",
    )
    auth = AdminAuth(EXPOSED)
    app = FastAPI()
    app.include_router(build_api(stack.db, stack.scheduler, auth=auth.api, desk=desk))
    app.include_router(build_ui(stack.db, auth=auth.ui, desk=desk))
    return app


async def test_form_creates_task_page_follows_it_live_follow_up_reaches_model_and_stop_ends_it(
    stack: Stack, browser: Browser
) -> None:
    with serve(_app(stack)) as running:
        page = await browser.new_page(viewport={"width": 1280, "height": 1400})
        await page.goto(f"{running.url}/ui/tasks?token=s3cret-admin")  # then the cookie
        await page.click("#new-task summary")
        await page.fill("#new-task-repo", "nobody/unknown")
        await page.fill("#new-task-text", "make a widget")
        await page.click("#new-task-form button[type=submit]")
        refused = page.locator("#new-task-form .action-result.error")
        await refused.wait_for()
        assert "unknown repository 'nobody/unknown'" in await refused.inner_text()
        assert (await stack.db.read(lambda s: views.list_tasks(s, limit=5))).tasks == ()

        await page.fill("#new-task-repo", "acme/widgets")
        await page.click("#new-task-form button[type=submit]")
        await page.wait_for_url("**/ui/tasks/t*")
        task_id = page.url.rsplit("/", 1)[1]
        task = await stack.scheduler.get(task_id)
        assert task is not None and (task.message, task.repo) == ("make a widget", "acme/widgets")

        await page.evaluate("window.keelSamePage = true")
        running_task = asyncio.create_task(stack.run_until_terminal(task_id, timeout=60))
        transcript = page.locator("table.transcript")
        await transcript.get_by_text("starting on the widget").wait_for(timeout=20_000)

        await page.fill("#follow-up-text", FOLLOW_UP)
        await page.click("#follow-up-form button[type=submit]")
        await transcript.get_by_text("noted: Safari only").wait_for(timeout=30_000)
        [message] = await stack.db.read(lambda s: mailbox.messages_after(s, task_id, 0))
        assert (message.text, message.author) == (FOLLOW_UP, "ui")

        await page.click("#stop-button")
        final = await running_task
        assert final.status is TaskStatus.canceled
        status = page.locator("#task-status")
        await page.wait_for_function(
            "document.querySelector('#task-status').textContent.trim() === 'canceled'",
            timeout=20_000,
        )
        assert await status.inner_text() == "canceled"
        assert await page.evaluate("window.keelSamePage") is True  # updated in place
        assert await page.locator("#task-controls").is_hidden()
