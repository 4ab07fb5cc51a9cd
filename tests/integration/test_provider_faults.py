"""Provider faults injected at the emulators, and a database outage, against real clients.

The whole Slack → PR → CI flow survives 429 with Retry-After, 500s, dropped responses after
accepted writes and an expired GitHub installation token with one PR, one 👀, one progress
message and one completion reply at the emulators. The outbox survives timeouts and dropped
responses with one post per key. While the database is away webhooks answer 503 (PostgreSQL)
or wait for it (SQLite, whose writers queue for up to its 30 s busy timeout); nothing that
was acknowledged is lost and the workers carry on afterwards.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from adapters.config import SlackConfig
from adapters.emulators.faults import FaultKind
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.github.client import GitHubClient
from adapters.github.surface import GitHubSurface
from adapters.slack.surface import SlackSurface, fetch_slack_identity, slack_client
from adapters.slack.workspaces import WebSessions
from runtime.clock import Clock, ManualClock, SystemClock
from runtime.outbox import OutboxDispatcher
from runtime.store import executions
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.outbox import OutboxPost, enqueue_post, posts_of_task
from runtime.surfaces import Surface
from runtime.threads import GitHubIssue, SlackThread, ThreadRef
from tests.databases import admin_url
from tests.factories import app_key_pair, github_app_settings
from tests.integration.keel_live import CHANNEL, SHOP, Live, drive, live_keel


@pytest.fixture(scope="module")
def app_key() -> tuple[str, str]:
    return app_key_pair()


def _unconsumed(*states: SlackState | GitHubState) -> list[str]:
    return [f"{f.target}:{f.kind}" for s in states for f in s.fault_plan.faults if f.remaining]


async def test_one_of_each_post_and_one_pr_when_providers_fail_along_the_way(
    db_url: str, tmp_path: Path, app_key: tuple[str, str]
) -> None:
    extra = github_app_settings(app_key[0], pin_installation=True)
    with live_keel(tmp_path, db_url, workers=True, extra=extra, app_public_key=app_key[1]) as live:
        live.slack.inject("reactions.add", "429", retry_after=1)
        live.slack.inject("chat.postMessage", "500")
        live.slack.inject("chat.postMessage", "drop_response")
        live.github.inject("pulls/create", "drop_response")

        expired: list[int] = []

        def on_step(turn: int) -> None:
            # The pull request is open (an installation token is in use) and CI is not green
            # yet, so reading CI must go through a 401 and a fresh token.
            if live.github.pulls_created(SHOP) and not expired:
                live.github.expire_token()
                expired.append(turn)

        task_id, root_ts = await drive(live, on_step=on_step)
        await asyncio.sleep(1)  # a last progress edit may still be in flight
        await _check_one_of_each(live, task_id, root_ts)


async def _check_one_of_each(live: Live, task_id: str, root_ts: str) -> None:
    slack, github = live.slack, live.github
    assert _unconsumed(slack, github) == []  # every fault really fired
    assert github.pulls_created(SHOP) == 1
    token_path = f"/app/installations/{github.installation_id}/access_tokens"
    assert len(github.requests_to("POST", token_path)) >= 2  # refreshed after the 401
    root = slack.find(CHANNEL, root_ts)
    assert root is not None and root.reactions == {"eyes": [slack.bot_user_id]}
    replies = [m for m in slack.thread(CHANNEL, root_ts) if m.bot_id]
    assert [m.text[:1] for m in replies] == ["⏳", "✅"], [m.text for m in replies]
    assert "PR #1" in replies[1].text and "CI: 2/2 checks passed" in replies[1].text
    db = Database.from_url(live.db_url)
    posts = await db.read(lambda s: posts_of_task(s, task_id))
    db.close()
    assert {p.purpose: p.state for p in posts}["completion"] == "landed"


# -- the outbox against timeouts and dropped responses ------------------------------------


@contextmanager
def _emulators() -> Iterator[tuple[SlackState, GitHubState, str, str]]:
    slack, github = SlackState(), GitHubState()
    github.add_token("ghp-faults", "keel-bot")
    github.add_repo(SHOP)
    github.add_issue(SHOP, "Build is red", "Please fix CI", user="alice")
    with serve(create_slack_app(slack)) as s, serve(create_github_app(github)) as g:
        yield slack, github, s.url, g.url


async def _short_timeout_surfaces(slack_url: str, github_url: str) -> dict[str, Surface]:
    config = SlackConfig(
        bot_token="xoxb-keel-emulated", signing_secret="unused", api_url=slack_url + "/api/"
    )
    client = slack_client(config, WebSessions(), timeout_s=1)
    return {
        "slack": SlackSurface.single(client, await fetch_slack_identity(client)),
        "github": GitHubSurface(GitHubClient.with_token(github_url, "ghp-faults", timeout_s=1)),
    }


async def _deliver_all(
    database: Database,
    surfaces: dict[str, Surface],
    clock: ManualClock,
    landed_late: Callable[[], bool],
) -> None:
    """Run the outbox until every post has landed. Its clock moves only once every late write
    has reached the emulators, so each retry comes after the write its first try lost, however
    loaded the machine is: what is tested is the reconciliation, not a race."""
    dispatcher = OutboxDispatcher(database, surfaces, clock)
    stopping = asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stopping, poll_s=0.1))
    try:
        async with asyncio.timeout(45):
            while not landed_late():
                await asyncio.sleep(0.05)
            while not all(p.state == "landed" for p in await _posts(database)):
                clock.advance(1.0)
                await asyncio.sleep(0.1)
    finally:
        stopping.set()
        await running


def _queue(targets: list[ThreadRef], clock: Clock) -> Any:
    now = clock.now()

    def queue(session: Session) -> None:
        for n, thread in enumerate(targets):
            enqueue_post(
                session,
                task_id="t1",
                purpose="update",
                thread=thread,
                key=f"t1:note{n}",
                action="post",
                body=f"note {n}",
                now=now,
            )

    return queue


@pytest.mark.parametrize("fault", ["drop_response", "timeout"])
async def test_one_post_per_key_when_provider_loses_the_response(
    database: Database, fault: FaultKind
) -> None:
    with _emulators() as (slack, github, slack_url, github_url):
        surfaces = await _short_timeout_surfaces(slack_url, github_url)
        root = slack.seed_message(CHANNEL, "please fix", user="U1")
        # A timed-out write still lands, late: 1.25 s after it was sent, past the client's 1 s.
        github.inject("issues/create-comment", fault, delay_s=1.25)
        slack.inject("chat.postMessage", fault, delay_s=1.25)
        clock = ManualClock(SystemClock().now())
        await database.run(
            _queue([GitHubIssue(SHOP, 1), SlackThread(slack.team_id, CHANNEL, root)], clock)
        )

        def landed_late() -> bool:
            return github.comments_created(SHOP) >= 1 and len(slack.bot_posts(CHANNEL)) >= 1

        await _deliver_all(database, surfaces, clock, landed_late)
    assert _unconsumed(slack, github) == []
    # Each post's first try lost its answer and the second found the write that landed.
    assert [p.attempts for p in await _posts(database)] == [2, 2]
    assert github.comments_created(SHOP) == 1
    assert [m.text for m in slack.bot_posts(CHANNEL)] == ["note 1"]


async def _posts(database: Database) -> list[OutboxPost]:
    return await database.read(lambda s: posts_of_task(s, "t1"))


# -- the database away for a few seconds ----------------------------------------------------


@contextmanager
def _database_away(db_url: str) -> Iterator[None]:
    """PostgreSQL: the database refuses connections and its sessions are terminated.
    SQLite: another process-like connection holds the file's exclusive lock."""
    if db_url.startswith("postgresql"):
        name = make_url(db_url).database
        admin = create_engine(str(admin_url()), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
            try:
                yield
            finally:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
        return
    holder = sqlite3.connect(
        str(make_url(db_url).database), isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("COMMIT")
        holder.close()


async def _progressed(live: Live, roots: list[str], timeout: float = 60) -> None:
    """Each mention got its 👀 and its task ran past its first turn (workers resumed)."""
    db = Database.from_url(live.db_url)
    team = live.slack.team_id

    async def turned(root: str) -> bool:
        task = await db.read(lambda s: q.latest_by_objective(s, f"slack:{team}/{CHANNEL}/{root}"))
        run = await db.read(lambda s: executions.load_run(s, task.task_id)) if task else None
        return run is not None and run.turn >= 1

    try:
        async with asyncio.timeout(timeout):
            while True:
                acked = all(
                    (m := live.slack.find(CHANNEL, r)) and m.reactions.get("eyes") for r in roots
                )
                if acked and all([await turned(r) for r in roots]):
                    return
                await asyncio.sleep(0.2)
    finally:
        db.close()


async def test_webhook_not_acknowledged_until_stored_when_database_is_away(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url, workers=True) as live:
        before = live.mention("the checkout tests fail, please fix it")
        assert [r.status_code for r in await live.send_slack(before)] == [200]
        during = live.mention("the login tests fail too, please fix them")
        event_id = "EvOUTAGE0001"
        with _database_away(db_url):
            started = time.monotonic()
            if db_url.startswith("postgresql"):
                [refused] = await live.send_slack(during, event_id=event_id)
                assert refused.status_code == 503
                await asyncio.sleep(2.5)  # the outage lasts; workers and the outbox hit it too
            else:
                # SQLite writers queue on the lock (busy timeout 30 s): the ack waits for it.
                waiting = asyncio.create_task(live.send_slack(during, event_id=event_id))
                await asyncio.sleep(3)
                assert not waiting.done()
        if not db_url.startswith("postgresql"):
            [held] = await waiting
            assert held.status_code == 200 and time.monotonic() - started >= 3
        # Slack delivers again what was not acknowledged (and, harmlessly, what was).
        [again] = await live.send_slack(during, event_id=event_id)
        assert again.status_code == 200
        await _progressed(live, [before["ts"], during["ts"]])
        counts = await live.counts()
    assert counts["tasks"] == 2
