"""Ingress through the real sink and store: a redelivery is stored once, bad input never."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from adapters.config import build_config
from adapters.emulators.corpus import load_github_example, load_slack_event
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import RunningServer, serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.emulators.webhooks import deliver, sign_github, sign_slack
from adapters.web.app import create_app
from runtime.store.engine import Database
from runtime.store.models import GitHubInboxRow, SignalRow, TaskRow

SLACK_SECRET = "ingest-signing-secret"
GITHUB_SECRET = "ingest-webhook-secret"


@pytest.fixture
def keel(db_url: str) -> Iterator[RunningServer]:
    slack, github = SlackState(), GitHubState()
    github.add_token("ghp-ingest", "keel-bot")
    with serve(create_slack_app(slack)) as s, serve(create_github_app(github)) as g:
        tree: dict[str, Any] = {
            "database": {"url": db_url},
            "slack": {
                "bot_token": "xoxb-keel-emulated",
                "signing_secret": SLACK_SECRET,
                "api_url": s.url + "/api/",
            },
            "github": {"token": "ghp-ingest", "webhook_secret": GITHUB_SECRET, "api_url": g.url},
            "server": {"body_limit_bytes": 65536},
        }
        with serve(create_app(build_config(tree, env={}), workers=False), lifespan="on") as app:
            yield app


def _count(db_url: str, model: Any) -> int:
    db = Database.from_url(db_url)
    try:
        return db.read_sync(
            lambda s: s.execute(select(func.count()).select_from(model)).scalar_one()
        )
    finally:
        db.close()


def _mention() -> dict[str, Any]:
    payload = load_slack_event("app_mention")
    payload["event"]["text"] = "<@U0KEELBOT1> please fix the build"
    # From the workspace of Keel's bot token (the emulator's): one token takes no other team's.
    payload["team_id"] = payload["event"]["team"] = SlackState().team_id
    return payload


async def test_same_slack_delivery_five_times_concurrently_stores_one_signal(
    keel: RunningServer, db_url: str
) -> None:
    request = sign_slack(_mention(), SLACK_SECRET)
    responses = await deliver(keel.url + "/slack/events", request, times=5, concurrently=True)
    assert [r.status_code for r in responses] == [200] * 5
    assert _count(db_url, SignalRow) == 1
    assert _count(db_url, TaskRow) == 1


async def test_same_github_delivery_five_times_concurrently_stores_one_signal(
    keel: RunningServer, db_url: str
) -> None:
    payload = load_github_example("issue_comment/created")
    request = sign_github("issue_comment", payload, GITHUB_SECRET, delivery_id="d-1234")
    responses = await deliver(keel.url + "/github/webhook", request, times=5, concurrently=True)
    assert [r.status_code for r in responses] == [200] * 5
    # Held once for the permission lookup, then routed once.
    deadline = time.monotonic() + 20
    while (_count(db_url, GitHubInboxRow) or not _count(db_url, SignalRow)) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.05)
    assert _count(db_url, SignalRow) == 1


async def test_bad_input_gets_its_status_and_stores_nothing(
    keel: RunningServer, db_url: str
) -> None:
    body = json.dumps(_mention()).encode()
    good = sign_slack(body, SLACK_SECRET)
    async with httpx.AsyncClient(base_url=keel.url) as client:
        forged = dict(good.headers, **{"X-Slack-Signature": "v0=" + "0" * 64})
        assert (await client.post("/slack/events", content=body, headers=forged)).status_code == 401
        unsigned = {"Content-Type": "application/json"}
        assert (
            await client.post("/slack/events", content=body, headers=unsigned)
        ).status_code == 401
        stale = sign_slack(body, SLACK_SECRET, timestamp=1_600_000_000)
        assert (
            await client.post("/slack/events", content=body, headers=stale.headers)
        ).status_code == 401
        junk = sign_slack(b"{not json", SLACK_SECRET)
        assert (
            await client.post("/slack/events", content=junk.body, headers=junk.headers)
        ).status_code == 400
        huge = sign_slack(b'{"x": "' + b"a" * 70000 + b'"}', SLACK_SECRET)
        assert (
            await client.post("/slack/events", content=huge.body, headers=huge.headers)
        ).status_code == 413
        gh = sign_github("issue_comment", body, "wrong-secret")
        assert (
            await client.post("/github/webhook", content=gh.body, headers=gh.headers)
        ).status_code == 401
    assert _count(db_url, SignalRow) == 0


async def test_unknown_event_is_acknowledged_and_dropped_with_a_reason(
    keel: RunningServer, db_url: str
) -> None:
    payload = load_github_example("installation/created")
    request = sign_github("installation", payload, GITHUB_SECRET)
    [response] = await deliver(keel.url + "/github/webhook", request)
    assert response.status_code == 200
    db = Database.from_url(db_url)
    rows = db.read_sync(lambda s: list(s.scalars(select(SignalRow))))
    db.close()
    assert [(r.decision, r.reason is not None) for r in rows] == [("drop", True)]
    assert _count(db_url, TaskRow) == 0

