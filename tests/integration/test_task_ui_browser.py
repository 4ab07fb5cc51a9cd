"""The task UI in headless Chromium: a task the executor really ran, served over loopback."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from adapters.emulators.server import serve
from tests.factories import make_spec
from tests.harness import Stack, build_stack
from tests.integration.test_web_api import (
    EXPOSED,
    LOOPBACK,
    MAILBOX_TEXT,
    SCRIPT,
    RealTask,
    make_app,
    produce_task,
    record_recovered_calls,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT = Path("/tmp/keel-task-page.png")


@pytest.fixture
def stack(db_url: str, tmp_path: Path) -> Iterator[Stack]:
    built = build_stack(db_url, tmp_path, SCRIPT)
    yield built
    built.db.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        reason = f"Debian chromium not found at {CHROMIUM} (.ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


async def _open(browser: Browser, url: str) -> Page:
    page = await browser.new_page(viewport={"width": 1280, "height": 1400})
    await page.goto(url)
    return page


async def test_task_page_shows_tool_rows_mailbox_and_evidence_when_task_ran(
    stack: Stack, browser: Browser
) -> None:
    real: RealTask = await produce_task(stack)
    with serve(make_app(stack, LOOPBACK)) as running:
        page = await _open(browser, f"{running.url}/ui/tasks/{real.task_id}")
        rows = page.locator(".tool-row")
        assert await rows.count() == 3
        assert await rows.evaluate_all("rs => rs.map(r => r.dataset.tool)") == [
            "lookup",
            "create_thing",
            "sleep",
        ]
        create = page.locator('.tool-row[data-tool="create_thing"]')
        assert await create.get_attribute("data-outcome") == "ok"
        assert 'title="widget <x>"' in await create.inner_text()  # escaped, shown as text
        assert "created widget <x>" in await create.inner_text()
        message = page.locator(".mailbox-message")
        assert await message.count() == 1
        assert await message.get_attribute("data-message-id") == real.message_id
        assert MAILBOX_TEXT in await message.inner_text()  # escaped: no <b> element
        assert await message.locator("b").count() == 0
        assert await message.locator(".incorporated-at").count() == 1
        evidence = page.locator(".evidence-item")
        assert await evidence.count() == 1
        assert "tool said" in await evidence.inner_text()
        landed = "landed on slack:T1/C1/1700000000.000100:1700000000.000200"
        assert landed in await page.locator(".outbox-post").inner_text()
        assert await page.locator("body[data-refresh]").count() == 0  # finished: no refresh
        await page.screenshot(path=str(SCREENSHOT), full_page=True)


async def test_task_list_links_to_task_page_when_filtered_by_status(
    stack: Stack, browser: Browser
) -> None:
    real = await produce_task(stack)
    with serve(make_app(stack, LOOPBACK)) as running:
        page = await _open(browser, f"{running.url}/ui/tasks")
        await page.click('a.filter[data-status="succeeded"]')
        await page.wait_for_url("**/ui/tasks?status=succeeded")
        assert await page.locator(".task-row").count() == 1
        await page.click(f'.task-row[data-task-id="{real.task_id}"] a')
        await page.wait_for_url(f"**/ui/tasks/{real.task_id}")
        assert await page.locator(".tool-row").count() == 3
        await page.goto(f"{running.url}/ui/tasks?status=failed")
        assert await page.locator(".task-row").count() == 0


async def test_list_refreshes_in_place_when_a_task_appears(stack: Stack, browser: Browser) -> None:
    with serve(make_app(stack, LOOPBACK)) as running:
        page = await _open(browser, f"{running.url}/ui/tasks")
        assert await page.locator(".task-row").count() == 0
        task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
        row = page.locator(f'.task-row[data-task-id="{task.task_id}"]')
        await row.wait_for(timeout=10_000)


async def test_ui_opens_with_token_once_when_bound_to_non_loopback(
    stack: Stack, browser: Browser
) -> None:
    real = await produce_task(stack)
    with serve(make_app(stack, EXPOSED)) as running:
        page = await _open(browser, f"{running.url}/ui/tasks?token=s3cret-admin")
        await page.click(f'.task-row[data-task-id="{real.task_id}"] a')  # cookie, no token
        await page.wait_for_url(f"**/ui/tasks/{real.task_id}")
        assert await page.locator(".evidence-item").count() == 1
        fresh = await browser.new_page()  # a new context: no cookie
        response = await fresh.request.get(f"{running.url}/ui/tasks/{real.task_id}")
        assert response.status == 401


async def test_tool_rows_show_interrupted_and_late_markers_when_recovery_settled_calls(
    stack: Stack, browser: Browser
) -> None:
    real = await produce_task(stack)
    await stack.db.run(lambda s: record_recovered_calls(s, real.task_id))
    with serve(make_app(stack, LOOPBACK)) as running:
        page = await _open(browser, f"{running.url}/ui/tasks/{real.task_id}")
        blind = page.locator('.tool-row[data-call-id="call_9_0"]')
        assert await blind.get_attribute("data-outcome") == "interrupted"
        assert await blind.locator(".interrupted-marker").is_visible()
        late = page.locator('.tool-row[data-call-id="call_0_0"] .late-marker')
        assert (await late.inner_text()).strip() == "late ×1"
        assert await page.locator(".tool-row .late-marker").count() == 1
