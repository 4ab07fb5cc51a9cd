"""The task brief of a Slack request, end to end: the real app, the Slack and GitHub
emulators, and a scripted model whose expectations prove what its first request held."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from adapters.emulators.slack import SlackMessage
from runtime.store.records import TaskStatus
from tests.integration.briefs import (
    PNG,
    failure,
    finished,
    first_request,
    script,
    slack_objective,
    transcript,
)
from tests.integration.keel_live import BOT_TOKEN, CHANNEL, GH_REPO, PERSON, Live, live_keel

ALICE = "U0ALICE001"
REPORT = "checkout is broken, KeyError 'sku' in cart.py"


def _keel_says(live: Live, text: str, root_ts: str) -> None:
    slack = live.slack
    slack.messages.append(
        SlackMessage(
            CHANNEL, slack.next_ts(), text, slack.bot_user_id, slack.bot_id, thread_ts=root_ts
        )
    )


def _thread(live: Live) -> str:
    """A report by Alice linking a GitHub issue, a word from Keel, a screenshot and a log."""
    slack, github = live.slack, live.github
    slack.add_user(ALICE, "Alice", real_name="Alice Example")
    title = "Cart total fails on missing sku"
    issue = github.add_issue(GH_REPO, title, "Seen in prod.", user="octocat")
    link = f"{live.app.state.keel.config.github.api_url}/{GH_REPO}/issues/{issue}"
    root = slack.seed_message(CHANNEL, f"{REPORT} (<{link}|the issue>)", user=ALICE)
    _keel_says(live, "I looked at cart.py yesterday; nothing obvious.", root)
    files = [
        slack.new_file("screenshot.png", "image/png", PNG, user=ALICE),
        slack.new_file("traceback.txt", "text/plain", b"KeyError: 'sku'\n", user=ALICE),
    ]
    slack.seed_message(CHANNEL, "here is what I see", user=ALICE, thread_ts=root, files=files)
    return root


async def _mention(live: Live, root: str, text: str) -> None:
    full = f"<@{live.slack.bot_user_id}> {text}"
    ts = live.slack.seed_message(CHANNEL, full, user=PERSON, thread_ts=root)
    await live.send_slack(live.event(ts, full, kind="app_mention", thread_ts=root))


async def _brief_of(live: Live, root: str) -> tuple[Any, str, list[Any]]:
    task = await finished(live, slack_objective(live, root))
    entries = await transcript(live, task.task_id)
    return task, str(entries[0].payload["text"]), entries


async def test_first_request_holds_thread_with_names_files_and_links_when_asked_in_a_thread(
    db_url: str, tmp_path: Path
) -> None:
    expected = [
        "Requested by: dana",
        "Came from: Slack, #general",
        "Link: https://keel-emulated.slack.com/archives/C0KEELGEN1/p",
        "Repository: acme/shop (default branch main)",
        f"Alice: {REPORT}",
        "Keel (your own earlier message): I looked at cart.py yesterday",
        "@Alice is right, can you fix it?",
        "screenshot.png (image/png, 80 B)",
        "traceback.txt (text/plain, 16 B): saved in the workspace as .keel/files/F0KEEL0002-",
        "Cart total fails on missing sku",
    ]
    extra = script(tmp_path / "s", {"expect_seen": expected, "say": "on it"})
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        root = _thread(live)
        await _mention(live, root, f"<@{ALICE}> is right, can you fix it?")
        task, brief, entries = await _brief_of(live, root)
        workspace = Path(live.app.state.keel.config.workspace.root) / task.task_id
    assert task.status is TaskStatus.succeeded, failure(task)
    assert [e.item_key for e in first_request(entries)] == [f"brief:{task.task_id}"]
    assert ALICE not in brief and live.slack.bot_user_id not in brief  # names, not ids
    assert (workspace / ".keel/files/F0KEEL0002-traceback.txt").read_bytes() == b"KeyError: 'sku'\n"
    assert (workspace / ".keel/files/F0KEEL0001-screenshot.png").read_bytes() == PNG
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=workspace, capture_output=True, text=True, check=True,
    )
    assert ".keel" not in status.stdout  # the files can never be committed
    assert "shown to you as an image" not in brief and "images" not in entries[0].payload
    # The token went to Slack's file host as a header; no file address reached the brief.
    downloads = [r for r in live.slack.requests if "/download/" in r.path]
    assert len(downloads) == 2 and BOT_TOKEN not in brief and "files-pri" not in brief


async def test_image_is_an_image_part_when_the_model_reads_images(
    db_url: str, tmp_path: Path
) -> None:
    turn = {"expect_images": ["screenshot.png"], "expect_seen": ["shown to you as an image"]}
    extra = script(tmp_path / "s", {**turn, "say": "I see the screenshot"})
    extra["model"]["vision"] = True
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        root = _thread(live)
        await _mention(live, root, "can you fix it?")
        task, _, entries = await _brief_of(live, root)
    assert task.status is TaskStatus.succeeded, failure(task)
    [image] = entries[0].payload["images"]
    assert image["media_type"] == "image/png" and image["name"] == "screenshot.png"


async def test_task_starts_and_brief_names_the_gaps_when_slack_fails_during_gathering(
    db_url: str, tmp_path: Path
) -> None:
    expected = [
        "## Could not fetch",
        "the Slack thread (conversations.replies): Slack internal_error (HTTP 500) (tried 2 times)",
        "users.info: Slack missing_scope (HTTP 200); the Slack app needs the users:read scope",
        "the channel's name (conversations.info): Slack transport error",
        "## Request\nis anything wrong?",
    ]
    extra = script(tmp_path / "s", {"expect_seen": expected, "say": "started anyway"})
    extra["context"] = {"fetch_attempts": 2, "request_timeout_s": 1}
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        root = live.slack.seed_message(CHANNEL, REPORT, user=PERSON)
        live.slack.inject("conversations.replies", "500", times=50)
        live.slack.inject("conversations.info", "timeout", times=50, delay_s=2.5)
        live.slack.refuse("users.info", "missing_scope", needed="users:read", provided="chat:write")
        await _mention(live, root, "is anything wrong?")
        task, brief, _ = await _brief_of(live, root)
    assert task.status is TaskStatus.succeeded, failure(task)
    replies = [r for r in live.slack.requests if r.path == "/api/conversations.replies"]
    assert len(replies) == 2  # context.fetch_attempts, then named as missing
    assert "Requested by: " + PERSON in brief  # the id, since its name could not be read


async def test_long_thread_is_cut_to_the_bound_with_the_omission_stated(
    db_url: str, tmp_path: Path
) -> None:
    bound = 6000
    expected = ["earlier messages omitted", f"Alice: {REPORT}", "message 499 of the thread"]
    extra = script(tmp_path / "s", {"expect_seen": expected, "say": "read it"})
    extra["context"] = {"max_chars": bound}
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        live.slack.add_user(ALICE, "Alice")
        root = live.slack.seed_message(CHANNEL, REPORT, user=ALICE)
        for n in range(1, 500):
            text = f"message {n} of the thread: " + "details " * 40
            live.slack.seed_message(CHANNEL, text, user=ALICE, thread_ts=root)
        await _mention(live, root, "summarise and fix")
        task, brief, entries = await _brief_of(live, root)
    assert task.status is TaskStatus.succeeded, failure(task)
    sent = first_request(entries)
    assert len(sent) == 1 and len(brief) <= bound
    [omitted] = re.findall(r"… (\d+) earlier messages omitted", brief)
    shown = len(re.findall(r"^- \[", brief, flags=re.MULTILINE))
    assert int(omitted) + shown == 501 and shown >= 3  # the report, the latest, the request
    pages = [r for r in live.slack.requests if r.path == "/api/conversations.replies"]
    assert len(pages) == 3  # 501 messages at 200 a page


async def test_display_names_are_looked_up_once_when_two_threads_share_people(
    db_url: str, tmp_path: Path
) -> None:
    extra = script(tmp_path / "s", {"expect_seen": [f"Alice: {REPORT}"], "say": "ok"})
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        live.slack.add_user(ALICE, "Alice")
        roots = [live.slack.seed_message(CHANNEL, REPORT, user=ALICE) for _ in range(2)]
        for root in roots:
            await _mention(live, root, "please look")
            task = await finished(live, slack_objective(live, root))
            assert task.status is TaskStatus.succeeded, failure(task)
    lookups = [r for r in live.slack.requests if r.path == "/api/users.info"]
    asked = [r.query.get("user") or (r.body or {}).get("user") for r in lookups]
    assert asked.count(ALICE) == 1 and asked.count(PERSON) == 1
