"""Approval before writes through Keel's real app, the Slack and GitHub emulators and a real
git remote: the demo's job with ``require_approval: [git_push, open_pull_request]``.

The push waits with a question that names the branch and the diff stat; a click on Approve
from someone not allowed is refused in a note only they see and pushes nothing; a ✅ from
Dana (delivered twice) lets exactly that push go ahead; the pull request's question shows
its title, and an Approve click (sent twice) opens one pull request."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from adapters.demo.repo import branch_head
from adapters.emulators.slack import SlackMessage
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.records import TaskStatus
from tests.integration.keel_live import CHANNEL, FOLLOW_UP, MENTION, PERSON, SHOP, Live, live_keel
from tests.integration.test_slack_actions import MALLORY, _post_click, _until

EXTRA = {
    "slack": {"allowed_users": [PERSON]},
    "agents": {"default": {"require_approval": ["git_push", "open_pull_request"]}},
}


def _asks(live: Live, root_ts: str) -> list[SlackMessage]:
    return [m for m in live.slack.thread(CHANNEL, root_ts) if m.bot_id and "Approval" in m.text]


def _click(live: Live, message: SlackMessage, root_ts: str, user: str, name: str) -> dict[str, Any]:
    [_, actions] = message.blocks or [None, {"elements": []}]
    [button] = [b for b in actions["elements"] if b["action_id"] == f"keel:{name}"]
    return {
        "type": "block_actions",
        "team": {"id": live.slack.team_id, "domain": "keel-emulated"},
        "user": {"id": user, "username": user.lower(), "team_id": live.slack.team_id},
        "api_app_id": live.slack.app_id,
        "container": {
            "type": "message",
            "message_ts": message.ts,
            "channel_id": CHANNEL,
            "is_ephemeral": False,
            "thread_ts": root_ts,
        },
        "trigger_id": uuid.uuid4().hex,
        "channel": {"id": CHANNEL, "name": "general"},
        "message": {"type": "message", "ts": message.ts, "thread_ts": root_ts, "text": ""},
        "actions": [{**button, "block_id": "keel", "action_ts": f"{time.time():.6f}"}],
    }


def _check_mark(item_ts: str) -> dict[str, Any]:
    return {
        "type": "reaction_added",
        "user": PERSON,
        "reaction": "white_check_mark",
        "item": {"type": "message", "channel": CHANNEL, "ts": item_ts},
        "event_ts": f"{time.time():.6f}",
    }


def _pushed(workdir: Path) -> str | None:
    try:
        return branch_head(workdir / "origin" / "acme" / "shop.git", "keel/fix-add")
    except Exception:  # the branch does not exist yet
        return None


async def _task_of(db: Database, live: Live, root: str) -> Any:
    objective = f"slack:{live.slack.team_id}/{CHANNEL}/{root}"
    found = await db.read(lambda s: q.latest_by_objective(s, objective))
    assert found is not None
    return found


async def test_push_and_pull_request_wait_for_an_authorised_approval_and_happen_once(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    workdir = tmp_path / "keel"
    with live_keel(workdir, db_url, workers=True, extra=EXTRA) as live:
        live.slack.add_user(MALLORY, "mallory")
        mention = live.mention(MENTION)
        root = mention["ts"]
        await live.send_slack(mention)

        async def turn_one() -> bool:
            return len(live.slack.thread(CHANNEL, root)) >= 2

        await _until(turn_one, 60, "the task never started")
        await asyncio.sleep(1.0)
        await live.send_slack(live.reply(root, FOLLOW_UP))

        async def asked(n: int) -> bool:
            return len(_asks(live, root)) >= n

        await _until(lambda: asked(1), 90, "the push never asked for approval")
        [push] = _asks(live, root)
        assert "`git_push`" in push.text and "keel/fix-add" in push.text
        assert "calc.py" in push.text  # the diff stat
        task = await _task_of(db, live, root)
        assert task.status == TaskStatus.waiting

        assert await _post_click(live, _click(live, push, root, MALLORY, "approve")) == 200

        async def told() -> bool:
            return any(m.user == MALLORY for m in live.slack.ephemeral)

        await _until(told, 15, "the refusal was not shown")
        assert "not allowed to approve" in live.slack.ephemeral[0].text
        await asyncio.sleep(0.5)
        assert _pushed(workdir) is None

        check = _check_mark(push.ts)
        await live.send_slack(check, event_id="EvCHECK1", times=2)
        await _until(lambda: asked(2), 60, "the pull request never asked for approval")
        assert _pushed(workdir) is not None
        pull = _asks(live, root)[1]

        async def answered() -> bool:
            found = live.slack.find(CHANNEL, push.ts)
            return found is not None and "Approved by" in found.text

        await _until(answered, 15, "the push's question still offers its buttons")
        edited = live.slack.find(CHANNEL, push.ts)
        assert edited is not None and len(edited.blocks or []) <= 1  # no buttons left
        assert "`open_pull_request`" in pull.text and "Fix add() to return the sum" in pull.text
        click = _click(live, pull, root, PERSON, "approve")
        assert await _post_click(live, click) == 200
        assert await _post_click(live, click) == 200  # the same click, delivered again

        async def opened() -> bool:
            return live.github.pulls_created(SHOP) >= 1

        await _until(opened, 30, "no pull request")
        sha = _pushed(workdir)
        assert sha is not None
        live.github.set_checks(SHOP, sha, [("tests", "success"), ("lint", "success")])

        async def ended() -> bool:
            current = await _task_of(db, live, root)
            return TaskStatus(current.status).is_terminal

        await _until(ended, 60, "the task never ended")
        final = await _task_of(db, live, root)
        pulls = live.github.pulls_created(SHOP)
        asks = len(_asks(live, root))
    db.close()
    assert final.status == TaskStatus.succeeded
    assert pulls == 1 and asks == 2
