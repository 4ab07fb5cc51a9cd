"""Security checks on the real app: no self-answering loop, no way in for the unauthorised,
no configured secret anywhere after the demo scenario, and an admin token off loopback.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import String, Text, select

from adapters.config import ServerConfig
from adapters.demo import scenario as demo
from adapters.emulators.server import serve
from adapters.emulators.webhooks import deliver, load_github_example, sign_slack
from adapters.logs import JsonFormatter
from adapters.web.api import build_api
from adapters.web.auth import AdminAuth
from adapters.web.ui import build_ui
from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from runtime.store.models import Base, SignalRow, TaskRow
from tests.integration.keel_live import (
    ADMIN_TOKEN,
    CHANNEL,
    GH_REPO,
    GH_USER,
    MALLORY,
    PERSON,
    SHOP,
    SIGNING_SECRET,
    Live,
    demo_script_after,
    drive,
    live_keel,
    until,
    until_ended,
)

INTRUDER = "U0INTRUDER"


async def _rows(db_url: str, model: Any) -> list[Any]:
    db = Database.from_url(db_url)
    try:
        return await db.read(lambda s: list(s.scalars(select(model))))
    finally:
        db.close()


# -- the bot never answers itself ----------------------------------------------------------


async def test_own_replies_dropped_as_self_generated_when_they_come_back_as_webhooks(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url, workers=True) as live:
        task_id, root_ts = await drive(live)
        own = [m for m in live.slack.thread(CHANNEL, root_ts) if m.bot_id]
        posts_before = len(live.slack.bot_posts())
        assert own
        for message in own:  # Slack sends the bot's own posts to its event subscription too
            event = live.event(
                message.ts,
                message.text,
                user=live.slack.bot_user_id,
                thread_ts=root_ts,
                bot_id=live.slack.bot_id,
            )
            mention = live.event(
                message.ts,
                f"<@{live.slack.bot_user_id}> {message.text}",
                user=live.slack.bot_user_id,
                kind="app_mention",
                thread_ts=root_ts,
                bot_id=live.slack.bot_id,
            )
            for echoed in (event, mention):
                assert [r.status_code for r in await live.send_slack(echoed)] == [200]
        comment = load_github_example(
            "issue_comment/created",
            **{"comment.body": "@keel fix it", "sender.login": "keel-bot", "sender.type": "Bot"},
        )
        assert [r.status_code for r in await live.send_github("issue_comment", comment)] == [200]
        tasks = await _rows(db_url, TaskRow)
        assert len(live.slack.bot_posts()) == posts_before
    signals = await _rows(db_url, SignalRow)
    echoes = [s for s in signals if (s.actor or {}).get("is_self")]
    assert len(echoes) >= 2 * len(own)
    assert {(s.decision, s.reason) for s in echoes} <= {
        ("drop", "self_generated"),
        ("drop", "duplicate"),
    }
    assert [t.task_id for t in tasks if t.parent_id is None] == [task_id]


# -- what the agent writes pings nobody ---------------------------------------------------

_ANNOUNCE = "announce the fix to everyone"


def _announcing_script(folder: Path, issue: int) -> Path:
    """The model writes every ping it can: through post_update and comment_on_issue."""
    update = f"<!channel> <!here> <!subteam^S0OPS> <@{MALLORY}> and <@{PERSON}>: fixed"
    comment = "@acme/reviewers @Codertocat: fixed"
    calls = [
        {"name": "post_update", "args": {"text": update}},
        {"name": "comment_on_issue", "args": {"number": issue, "text": comment}},
    ]
    turns = [{"tool_calls": calls}, {"say": "Announced it."}]
    return demo_script_after(folder, {"match": "announce", "turns": turns})


async def test_tool_writes_ping_only_allowed_people_when_the_agent_writes_mentions(
    db_url: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "keel"
    issue = 1  # the repository's first issue, made below before anything else
    extra = {
        "model": {"script": str(_announcing_script(tmp_path / "model", issue))},
        "slack": {"allowed_mentions": [PERSON]},
    }
    with live_keel(workdir, db_url, workers=True, extra=extra) as live:
        assert live.github.add_issue(SHOP, "Build is red", "CI fails", user=GH_USER) == issue
        root_ts = await live.start_thread(_ANNOUNCE)
        db = Database.from_url(db_url)
        try:
            task = await _task_of(live, db, root_ts)
            await until_ended(db, task)
        finally:
            db.close()

        async def updated() -> bool:  # the outbox may deliver it after the task ended
            return any("fixed" in m.text for m in live.slack.bot_posts(CHANNEL))

        await until(updated, 30, "the update was not posted")
        [update] = [m for m in live.slack.bot_posts(CHANNEL) if "fixed" in m.text]
        [comment] = live.github.repos[SHOP].comments.values()
    assert update.text == (
        f"&lt;!channel&gt; &lt;!here&gt; &lt;!subteam^S0OPS&gt; &lt;@{MALLORY}&gt; "
        f"and <@{PERSON}>: fixed"
    )
    assert comment.body.startswith("@<!-- -->acme/reviewers @<!-- -->Codertocat: fixed")


async def _task_of(live: Live, db: Database, root_ts: str) -> str:
    async def started() -> bool:
        return await live.thread_task(db, root_ts) is not None

    await until(started, 30, "no task for the thread")
    task = await live.thread_task(db, root_ts)
    assert task is not None
    return task.task_id


# -- unauthorised actors -------------------------------------------------------------------


@pytest.fixture
def guarded(db_url: str, tmp_path: Path) -> Iterator[Live]:
    extra = {"slack": {"allowed_users": [PERSON]}, "github": {"min_permission": "write"}}
    with live_keel(tmp_path, db_url, extra=extra) as live:
        live.slack.add_user(INTRUDER, "mallory")
        live.github.add_user("mallory")
        live.github.set_permission(GH_REPO, "mallory", "read")
        yield live


async def test_unauthorised_people_cannot_start_or_stop_tasks_when_not_allowed(
    guarded: Live, db_url: str
) -> None:
    live = guarded
    await live.send_slack(live.mention("please fix the flaky test", user=INTRUDER))
    await live.send_github(
        "issue_comment",
        load_github_example(
            "issue_comment/created",
            **{
                "comment.body": "@keel please fix this",
                "comment.id": 7001,
                "sender.login": "mallory",
            },
        ),
    )
    # A GitHub request is routed once its author's permission is known, after the answer.
    await _settled(live, signals=2)
    assert (await live.counts())["tasks"] == 0

    allowed = live.mention("please fix the flaky test")
    await live.send_slack(allowed)
    await live.send_github(
        "issue_comment",
        load_github_example(
            "issue_comment/created", **{"comment.body": "@keel please fix this", "comment.id": 7002}
        ),
    )
    await _settled(live, signals=4)
    assert (await live.counts())["tasks"] == 2
    await live.send_slack(
        live.reply(allowed["ts"], f"<@{live.slack.bot_user_id}> stop", user=INTRUDER)
    )
    await live.send_github(
        "issue_comment",
        load_github_example(
            "issue_comment/created",
            **{"comment.body": "@keel stop", "comment.id": 7003, "sender.login": "mallory"},
        ),
    )

    await _settled(live, signals=6)
    tasks = await _rows(db_url, TaskRow)
    assert [(t.status, t.cancel_requested_at) for t in tasks] == [("queued", None)] * 2
    refused = [s for s in await _rows(db_url, SignalRow) if s.decision == "drop"]
    assert {s.reason for s in refused} == {"unauthorised"} and len(refused) == 4


async def test_event_from_another_workspace_starts_nothing_when_one_bot_token_is_set(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url) as live:
        mention = live.mention("please fix the flaky test")
        foreign = {**live.envelope(mention), "team_id": "T0FOREIGN1"}
        signed = sign_slack(foreign, SIGNING_SECRET)
        [response] = await deliver(live.url + "/slack/events", signed)
        await _settled(live, signals=1)
        assert (await live.counts())["tasks"] == 0
        await live.send_slack(mention)  # the same mention from Keel's own workspace
        await _settled(live, signals=2)
        assert (await live.counts())["tasks"] == 1
    assert response.status_code == 200
    dropped = [s for s in await _rows(db_url, SignalRow) if s.decision == "drop"]
    assert [(s.reason, s.text) for s in dropped] == [
        (
            "unauthorised",
            f"foreign workspace: event from Slack workspace 'T0FOREIGN1'; Keel's bot token "
            f"is for '{live.slack.team_id}'",
        )
    ]
    assert live.slack.bot_posts() == []  # not even a 👀 or a refusal went to Slack


async def _settled(live: Live, *, signals: int, timeout_s: float = 20.0) -> None:
    """Until ``signals`` deliveries are routed (GitHub's after their permission lookup)."""
    deadline = time.monotonic() + timeout_s
    while (await live.counts())["signals"] < signals:
        assert time.monotonic() < deadline, "deliveries not routed in time"
        await asyncio.sleep(0.05)


# -- secrets ------------------------------------------------------------------------------


def _text_columns(session: Any) -> list[str]:
    found: list[str] = []
    for table in Base.metadata.sorted_tables:
        columns = [
            c
            for c in table.columns
            if isinstance(c.type, String | Text) or c.type.__class__.__name__ == "Json"
        ]
        for row in session.execute(select(*columns)).all() if columns else []:
            found.extend(str(v) for v in row if v is not None)
    return found


async def test_no_configured_secret_is_stored_logged_or_posted_when_demo_has_run(
    db_url: str, tmp_path: Path
) -> None:
    secrets = (demo.SIGNING_SECRET, demo.BOT_TOKEN, demo.GITHUB_TOKEN, demo.WEBHOOK_SECRET)
    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        result = await demo.run_demo(tmp_path, db_url=db_url, echo=lambda line: None)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert result.ok, result.problems
    assert result.slack is not None and result.github is not None
    db = Database.from_url(db_url)
    stored = await db.read(_text_columns)
    db.close()
    files = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]
    replies = (
        [m.text for m in result.slack.messages]
        + [c.body for repo in result.github.repos.values() for c in repo.comments.values()]
        + [p.body or "" for repo in result.github.repos.values() for p in repo.pulls.values()]
    )
    assert len(stored) > 100 and len(files) > 10 and captured.getvalue()
    for secret in secrets:
        assert not [v for v in stored if secret in v], f"{secret} stored in the database"
        assert secret not in captured.getvalue(), f"{secret} in the logs"
        assert not [f for f in files if secret.encode() in f], f"{secret} in a file"
        assert not [r for r in replies if secret in r], f"{secret} in a reply"


# -- the operator API and UI off loopback --------------------------------------------------


@pytest.fixture
def exposed(database: Database) -> Iterator[str]:
    auth = AdminAuth(ServerConfig(host="0.0.0.0", admin_token=ADMIN_TOKEN))
    app = FastAPI()
    app.include_router(build_api(database, Scheduler(database), auth=auth.api))
    app.include_router(build_ui(database, auth=auth.ui))
    with serve(app) as server:
        yield server.url


@pytest.mark.parametrize("path", ["/api/tasks", "/api/tasks/t_missing", "/ui/tasks", "/ui"])
async def test_api_and_ui_refuse_requests_without_admin_token_when_bound_off_loopback(
    exposed: str, path: str
) -> None:
    async with httpx.AsyncClient(base_url=exposed, timeout=10) as client:
        bare = await client.get(path)
        wrong = await client.get(path, headers={"Authorization": "Bearer not-the-token"})
        cancel = await client.post("/api/tasks/t_missing/cancel")
        right = await client.get(path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert (bare.status_code, wrong.status_code, cancel.status_code) == (401, 401, 401)
    assert right.status_code in (200, 307, 404)  # /ui redirects to /ui/tasks
