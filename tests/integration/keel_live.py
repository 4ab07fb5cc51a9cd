"""Keel's real app served on loopback against the Slack and GitHub emulators, for the
reliability and security suites: signed deliveries in, database and emulator state out.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import yaml
from sqlalchemy import func, select

import adapters.demo
from adapters.config import AppConfig, build_config
from adapters.demo.repo import branch_head, create_sample_repo
from adapters.demo.scenario import DemoSecrets, demo_tree
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import RunningServer, serve
from adapters.emulators.slack import SlackMessage, SlackState, create_slack_app
from adapters.emulators.slack_socket import SocketHub
from adapters.emulators.webhooks import deliver, sign_github, sign_slack
from adapters.web.app import create_app
from runtime.store import executions
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.models import GitHubInboxRow, MailboxMessageRow, SignalRow, TaskRow
from runtime.store.outbox import posts_of_task
from runtime.store.records import Task, TaskStatus

CHANNEL = "C0KEELGEN1"
PERSON = "U0DEMODANA"
MALLORY = "U0MALLORY1"  # a Slack user who is not allowed to start, stop or approve anything
SIGNING_SECRET = "live-signing-secret-5f2c"
BOT_TOKEN = "xoxb-live-bot-token-8d41"
GITHUB_TOKEN = "ghp_live_token_77ab3e"
WEBHOOK_SECRET = "live-webhook-secret-c9e0"
ADMIN_TOKEN = "live-admin-token-4b1d"
APP_TOKEN = "xapp-live-app-token-31c7"
GH_REPO = "Codertocat/Hello-World"
GH_USER = "Codertocat"
SHOP = "acme/shop"
MENTION = "the checkout tests are failing on main, can you fix it?"
FOLLOW_UP = "Please keep the public API of calc unchanged."
SECRETS = (SIGNING_SECRET, BOT_TOKEN, GITHUB_TOKEN, WEBHOOK_SECRET)
TERMINAL_NAMES = ("succeeded", "failed", "canceled", "timed_out")


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and key in out else value
    return out


def live_config(
    workdir: Path,
    db_url: str,
    slack_url: str,
    github_url: str,
    bare: Path,
    extra: dict[str, Any],
) -> AppConfig:
    secrets = DemoSecrets(SIGNING_SECRET, BOT_TOKEN, GITHUB_TOKEN, WEBHOOK_SECRET)
    tree = demo_tree(workdir, db_url, slack_url, github_url, bare, secrets)
    _without_report(Path(tree["model"]["script"]))
    tree["worker"] = {"concurrency": 2, "poll_interval_s": 0.1, "lease_seconds": 5}
    return build_config(merge(tree, extra), env={})


def demo_script_after(folder: Path, *scripts: dict[str, Any]) -> Path:
    """The demo's model script (less its demand for a report before the mention), with
    ``scripts`` tried before it: for suites whose later tasks need turns of their own."""
    demo = Path(adapters.demo.__file__).with_name("script.yaml").read_text()
    data = yaml.safe_load(demo.replace("{python}", sys.executable))
    _fix_script(data)["turns"][0].pop("expect_seen")
    data["scripts"][:0] = scripts
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _without_report(script: Path) -> None:
    """The demo's script, less its first turn's demand for the report posted before the
    mention: these suites mention Keel in fresh threads of their own."""
    data = yaml.safe_load(script.read_text())
    _fix_script(data)["turns"][0].pop("expect_seen")
    script.write_text(yaml.safe_dump(data))


def _fix_script(data: dict[str, Any]) -> dict[str, Any]:
    """The demo's script for its fix request (the review step's comes before it)."""
    found: dict[str, Any] = next(s for s in data["scripts"] if s.get("match") == "(?i)fix")
    return found


@dataclass
class Live:
    url: str
    db_url: str
    slack: SlackState
    github: GitHubState
    app: Any
    hub: SocketHub | None = None

    def mention(
        self, text: str, *, user: str = PERSON, kind: str = "app_mention"
    ) -> dict[str, Any]:
        ts = self.slack.seed_message(CHANNEL, f"<@{self.slack.bot_user_id}> {text}", user=user)
        return self.event(ts, f"<@{self.slack.bot_user_id}> {text}", user=user, kind=kind)

    def event(
        self,
        ts: str,
        text: str,
        *,
        user: str = PERSON,
        kind: str = "message",
        thread_ts: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        event = {
            "type": kind,
            "user": user,
            "text": text,
            "ts": ts,
            "channel": CHANNEL,
            "event_ts": ts,
            "channel_type": "channel",
            **extra,
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        return event

    def reply(self, root_ts: str, text: str, *, user: str = PERSON) -> dict[str, Any]:
        ts = self.slack.seed_message(CHANNEL, text, user=user, thread_ts=root_ts)
        return self.event(ts, text, user=user, thread_ts=root_ts)

    async def start_thread(self, text: str) -> str:
        """Mentions Keel with ``text`` as a new message; returns that message's (the root's) ts."""
        mention = self.mention(text)
        await self.send_slack(mention)
        return str(mention["ts"])

    async def thread_task(self, db: Database, root_ts: str) -> Task | None:
        """The newest task working on the thread that starts at ``root_ts``."""
        objective = f"slack:{self.slack.team_id}/{CHANNEL}/{root_ts}"
        return await db.read(lambda s: q.latest_by_objective(s, objective))

    def reaction(self, item_ts: str, reaction: str, *, user: str = PERSON) -> dict[str, Any]:
        return {
            "type": "reaction_added",
            "user": user,
            "reaction": reaction,
            "item": {"type": "message", "channel": CHANNEL, "ts": item_ts},
            "event_ts": f"{time.time():.6f}",
        }

    def click(
        self, message: SlackMessage, root_ts: str, user: str, name: str = "stop"
    ) -> dict[str, Any]:
        """A ``block_actions`` payload for the ``name`` button on ``message``, as Slack sends
        it."""
        [_, actions] = message.blocks or [None, {"elements": []}]
        [button] = [b for b in actions["elements"] if b["action_id"] == f"keel:{name}"]
        return {
            "type": "block_actions",
            "team": {"id": self.slack.team_id, "domain": "keel-emulated"},
            "user": {"id": user, "username": user.lower(), "team_id": self.slack.team_id},
            "api_app_id": self.slack.app_id,
            "token": "unused",
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
            "response_url": "https://hooks.slack.invalid/actions/unused",
            "actions": [{**button, "block_id": "keel", "action_ts": f"{time.time():.6f}"}],
        }

    async def send_click(self, payload: dict[str, Any]) -> int:
        """Posts a click, signed, to /slack/interactivity; returns the response's status."""
        body = urlencode({"payload": json.dumps(payload)}).encode()
        signed = sign_slack(body, SIGNING_SECRET)
        headers = signed.headers | {"Content-Type": "application/x-www-form-urlencoded"}
        [response] = await deliver(
            self.url + "/slack/interactivity", signed.with_headers(**headers)
        )
        return response.status_code

    async def note_shown_to(self, user: str) -> None:
        """Until ``user`` has been shown a note only they see (a refusal, where they may not)."""

        async def told() -> bool:
            return any(m.user == user for m in self.slack.ephemeral)

        await until(told, 15, "the refusal was not shown")

    def envelope(self, event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
        return {
            "token": "unused",
            "team_id": self.slack.team_id,
            "api_app_id": "A0KEELAPP1",
            "type": "event_callback",
            "event_id": event_id or "Ev" + uuid.uuid4().hex[:10].upper(),
            "event_time": int(time.time()),
            "event": event,
        }

    async def send_slack(
        self, event: dict[str, Any], *, event_id: str | None = None, times: int = 1
    ) -> list[httpx.Response]:
        signed = sign_slack(self.envelope(event, event_id), SIGNING_SECRET)
        return await deliver(
            self.url + "/slack/events", signed, times=times, concurrently=True, slack_retries=True
        )

    def send_socket(self, event: dict[str, Any], *, event_id: str | None = None) -> str:
        """One envelope on Keel's Socket Mode websocket; returns its envelope id."""
        assert self.hub is not None, "live_keel(socket_mode=True) serves Socket Mode"
        return self.hub.send(self.envelope(event, event_id))

    async def send_github(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        delivery_id: str | None = None,
        times: int = 1,
    ) -> list[httpx.Response]:
        signed = sign_github(event, payload, WEBHOOK_SECRET, delivery_id=delivery_id)
        return await deliver(self.url + "/github/webhook", signed, times=times, concurrently=True)

    async def drained(self, timeout_s: float = 30.0) -> None:
        """Until no GitHub delivery is held for its permission lookup: all are routed."""
        deadline = time.monotonic() + timeout_s
        while (await self.counts())["held"]:
            assert time.monotonic() < deadline, "held GitHub deliveries were not routed"
            await asyncio.sleep(0.05)

    async def counts(self) -> dict[str, int]:
        db = Database.from_url(self.db_url)

        def read(session: Any) -> dict[str, int]:
            def count(row: Any) -> int:
                return int(session.execute(select(func.count()).select_from(row)).scalar_one())

            return {
                "signals": count(SignalRow),
                # What a webhook stored (not the API's own requests, which a caller may make).
                "webhook_signals": int(
                    session.execute(
                        select(func.count())
                        .select_from(SignalRow)
                        .where(SignalRow.provider.in_(("slack", "github")))
                    ).scalar_one()
                ),
                "tasks": count(TaskRow),
                "mailbox": count(MailboxMessageRow),
                "held": count(GitHubInboxRow),
            }

        try:
            return await db.read(read)
        finally:
            db.close()


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout}s")


async def until_ended(db: Database, task_id: str, timeout: float = 30) -> Task:
    """The task once its status is terminal."""

    async def done() -> bool:
        task = await db.read(lambda s: q.get_task(s, task_id))
        return task is not None and TaskStatus(task.status).is_terminal

    await until(done, timeout, "the task never ended")
    task = await db.read(lambda s: q.get_task(s, task_id))
    assert task is not None
    return task


@contextmanager
def live_keel(
    workdir: Path,
    db_url: str,
    *,
    workers: bool = False,
    extra: dict[str, Any] | None = None,
    app_public_key: str | None = None,
    socket_mode: bool = False,
) -> Iterator[Live]:
    """Emulators and Keel on loopback; the GitHub user Codertocat may write to Hello-World,
    and ``acme/shop`` is the demo's sample repository (with a failing test). With
    ``socket_mode`` Slack events come over the emulator's Socket Mode websocket."""
    workdir.mkdir(parents=True, exist_ok=True)
    bare = create_sample_repo(workdir / "origin")
    slack, github = SlackState(), GitHubState(app_public_key=app_public_key)
    github.add_repo(SHOP).resolve_branch = lambda branch: branch_head(bare, branch)
    slack.tokens.add(BOT_TOKEN)
    slack.add_user(PERSON, "dana", real_name="Dana")
    github.add_token(GITHUB_TOKEN, "keel-bot")
    github.add_git_repo(GH_REPO, workdir / "github-git")  # cloned on demand, with the token
    github.add_user(GH_USER)
    github.set_permission(GH_REPO, GH_USER, "write")
    servers: list[RunningServer] = []
    hub = SocketHub(app_id=slack.app_id, ack_timeout_s=2.0).start() if socket_mode else None
    slack.socket = hub
    slack.app_tokens.add(APP_TOKEN)
    extra = merge(extra or {}, {"slack": {"app_token": APP_TOKEN}} if socket_mode else {})
    try:
        servers += [serve(create_slack_app(slack)), serve(create_github_app(github))]
        config = live_config(workdir, db_url, servers[0].url, servers[1].url, bare, extra)
        app = create_app(config, workers=workers)
        servers.append(serve(app, lifespan="on"))
        yield Live(servers[2].url, db_url, slack, github, app, hub)
    finally:
        for server in reversed(servers):
            server.stop()
        if hub is not None:
            hub.stop()


def _play_ci(github: GitHubState) -> None:
    repo = github.repos[SHOP]
    for pull in repo.pulls.values():
        if pull.head_sha not in repo.checks:
            github.set_checks(SHOP, pull.head_sha, [("tests", "success"), ("lint", "success")])


async def _step(
    live: Live,
    db: Database,
    task: Any,
    root_ts: str,
    on_step: Callable[[int], None] | None,
    state: dict[str, int],
) -> bool:
    """One look at the run: faults, the follow-up and CI as due; True once it is all over."""
    task_id = task.task_id
    run = await db.read(lambda s: executions.load_run(s, task_id))
    if run is None:
        return False
    if on_step is not None:
        on_step(run.turn)
    if not state["followed"] and run.turn >= 1:
        await live.send_slack(live.reply(root_ts, FOLLOW_UP))
        state["followed"] = 1
    _play_ci(live.github)
    posts = await db.read(lambda s: posts_of_task(s, task_id))
    return task.status in TERMINAL_NAMES and any(
        p.purpose == "completion" and p.state in ("landed", "failed") for p in posts
    )


async def drive(
    live: Live,
    *,
    text: str = MENTION,
    timeout: float = 120,
    on_step: Callable[[int], None] | None = None,
) -> tuple[str, str]:
    """The demo's conversation: a mention, a follow-up mid-run, green CI on each pull request.

    Returns (task id, root ts) once the task is terminal and its completion post settled;
    ``on_step`` is called with the turn at every look, before CI is played (to arm faults).
    """
    event = live.mention(text)
    await live.send_slack(event)
    objective = f"slack:{live.slack.team_id}/{CHANNEL}/{event['ts']}"
    db = Database.from_url(live.db_url)
    state = {"followed": 0}
    try:
        async with asyncio.timeout(timeout):
            while True:
                task = await db.read(lambda s: q.latest_by_objective(s, objective))
                if task is not None:
                    done = await _step(live, db, task, event["ts"], on_step, state)
                    if done:
                        return task.task_id, event["ts"]
                await asyncio.sleep(0.1)
    finally:
        db.close()
