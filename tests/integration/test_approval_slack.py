"""Approval before writes through Keel's real app, the Slack and GitHub emulators and a real
git remote: the demo's job with ``require_approval: [git_push, open_pull_request]``.

The push waits with a question that names the branch and the diff stat; a click on Approve
from someone not allowed is refused in a note only they see and pushes nothing; a ✅ from
Dana (delivered twice) lets exactly that push go ahead; the pull request's question shows
its title, and an Approve click (sent twice) opens one pull request."""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters.demo.repo import branch_head
from adapters.emulators.slack import SlackMessage
from runtime.store.engine import Database
from runtime.store.records import Task, TaskStatus
from tests.integration.keel_live import (
    CHANNEL,
    FOLLOW_UP,
    MALLORY,
    MENTION,
    PERSON,
    SHOP,
    Live,
    live_keel,
    until,
    until_ended,
)

EXTRA = {
    "slack": {"allowed_users": [PERSON]},
    "agents": {"default": {"require_approval": ["git_push", "open_pull_request"]}},
}


def _asks(live: Live, root_ts: str) -> list[SlackMessage]:
    return [m for m in live.slack.thread(CHANNEL, root_ts) if m.bot_id and "Approval" in m.text]


def _pushed(workdir: Path) -> str | None:
    try:
        return branch_head(workdir / "origin" / "acme" / "shop.git", "keel/fix-add")
    except Exception:  # the branch does not exist yet
        return None


async def _task_of(db: Database, live: Live, root: str) -> Task:
    found = await live.thread_task(db, root)
    assert found is not None
    return found


async def test_push_and_pull_request_wait_for_an_authorised_approval_and_happen_once(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    workdir = tmp_path / "keel"
    with live_keel(workdir, db_url, workers=True, extra=EXTRA) as live:
        live.slack.add_user(MALLORY, "mallory")
        root = await live.start_thread(MENTION)

        async def turn_one() -> bool:
            return len(live.slack.thread(CHANNEL, root)) >= 2

        await until(turn_one, 60, "the task never started")
        await asyncio.sleep(1.0)
        await live.send_slack(live.reply(root, FOLLOW_UP))

        async def asked(n: int) -> bool:
            return len(_asks(live, root)) >= n

        await until(lambda: asked(1), 90, "the push never asked for approval")
        [push] = _asks(live, root)
        assert "`git_push`" in push.text and "keel/fix-add" in push.text
        assert "calc.py" in push.text  # the diff stat
        task = await _task_of(db, live, root)
        assert task.status == TaskStatus.waiting

        assert await live.send_click(live.click(push, root, MALLORY, "approve")) == 200
        await live.note_shown_to(MALLORY)
        assert "not allowed to approve" in live.slack.ephemeral[0].text
        await asyncio.sleep(0.5)
        assert _pushed(workdir) is None

        check = live.reaction(push.ts, "white_check_mark")
        await live.send_slack(check, event_id="EvCHECK1", times=2)
        await until(lambda: asked(2), 60, "the pull request never asked for approval")
        assert _pushed(workdir) is not None
        pull = _asks(live, root)[1]

        async def answered() -> bool:
            found = live.slack.find(CHANNEL, push.ts)
            return found is not None and "Approved by" in found.text

        await until(answered, 15, "the push's question still offers its buttons")
        edited = live.slack.find(CHANNEL, push.ts)
        assert edited is not None and len(edited.blocks or []) <= 1  # no buttons left
        assert "`open_pull_request`" in pull.text and "Fix add() to return the sum" in pull.text
        click = live.click(pull, root, PERSON, "approve")
        assert await live.send_click(click) == 200
        assert await live.send_click(click) == 200  # the same click, delivered again

        async def opened() -> bool:
            return live.github.pulls_created(SHOP) >= 1

        await until(opened, 30, "no pull request")
        sha = _pushed(workdir)
        assert sha is not None
        live.github.set_checks(SHOP, sha, [("tests", "success"), ("lint", "success")])
        final = await until_ended(db, task.task_id, timeout=60)
        pulls = live.github.pulls_created(SHOP)
        asks = len(_asks(live, root))
    db.close()
    assert final.status == TaskStatus.succeeded
    assert pulls == 1 and asks == 2
