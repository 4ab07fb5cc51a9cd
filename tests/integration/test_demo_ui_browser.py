"""The demo's task page in headless Chromium: the task brief, tool rows, the mailbox message,
the evidence."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from adapters.demo.scenario import run_demo
from tests.integration.test_task_ui_browser import CHROMIUM, CHROMIUM_ARGS


async def test_demo_task_page_shows_tools_mailbox_and_evidence_in_chromium(
    tmp_path: Path,
) -> None:
    if shutil.which(CHROMIUM) is None:
        if os.environ.get("CI"):
            pytest.fail(f"Debian chromium not found at {CHROMIUM}")
        pytest.skip(f"Debian chromium not found at {CHROMIUM}")
    seen: dict[str, list[str]] = {}

    async def look(keel_url: str, task_id: str) -> None:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = await browser.new_page()
            await page.goto(f"{keel_url}/ui/tasks/{task_id}")
            seen["tools"] = await page.locator(".tool-row").all_inner_texts()
            seen["mailbox"] = await page.locator(".mailbox-message").all_inner_texts()
            seen["brief"] = await page.locator(".kind-brief").all_inner_texts()
            seen["evidence"] = await page.locator(".evidence-item").all_inner_texts()
            await page.screenshot(path=str(tmp_path / "demo-task.png"), full_page=True)
            await browser.close()

    result = await run_demo(tmp_path, echo=lambda line: None, inspect=look, timeout_s=120)
    assert result.ok, result.problems
    tools = " ".join(seen["tools"])
    for name in ("run_command", "write_file", "git_commit", "open_pull_request", "wait_for_ci"):
        assert name in tools
    assert len(seen["mailbox"]) == 1
    assert "public API" in str(seen["mailbox"])
    [brief] = seen["brief"]
    assert "task brief" in brief and "CI on main is red since this morning" in brief
    evidence = " ".join(seen["evidence"])
    assert "pull_request" in evidence or "PR" in evidence
    assert "verified" in evidence
