"""The demo scenario, also the end-to-end test: a Slack mention becomes a verified fix.

It starts the Slack and GitHub emulators and Keel on loopback, creates a sample repository
with a failing test, posts a report of the failure and, in its thread, a signed mention asking
Keel to fix it (the scripted model must see the report, which only the task brief carries),
then mid-run a follow-up; it plays CI on the pull request the agent opens, and shows the
thread as a person would see it. Then (``adapters/demo/review.py``) a person asks Keel to
review a pull request of hers, and the review lands on it.

With ``socket_mode`` (``keel demo --socket-mode``) Keel gets an app-level token instead of
serving ``/slack/events``: it opens the emulator's Socket Mode websocket, and each event is
sent as an envelope that must be acknowledged, as Slack does for a Keel behind a firewall.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from adapters.config import AppConfig, build_config
from adapters.demo.repo import branch_head, create_sample_repo
from adapters.demo.review import review_step
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import RunningServer, serve
from adapters.emulators.slack import SlackMessage, SlackState, create_slack_app
from adapters.emulators.slack_socket import SocketHub
from adapters.emulators.webhooks import deliver, sign_slack
from adapters.slack.markup import plain_text
from adapters.web.app import create_app
from runtime.store import executions, tool_calls
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.outbox import posts_of_task

CHANNEL = "C0KEELGEN1"
PERSON = ("U0DEMODANA", "dana")
SIGNING_SECRET = "demo-signing-secret"
BOT_TOKEN = "xoxb-keel-emulated"
APP_TOKEN = "xapp-keel-emulated"
GITHUB_TOKEN = "ghp-demo-token"
WEBHOOK_SECRET = "demo-webhook-secret"
REPO = "acme/shop"
REPORT = "CI on main is red since this morning: test_add says add(2, 3) returns -1."
MENTION = "the checkout tests are failing on main, can you fix it?"
FOLLOW_UP = "Please keep the public API of calc unchanged."

Echo = Callable[[str], None]


@dataclass
class DemoResult:
    ok: bool
    task_id: str | None
    thread: list[str]
    problems: list[str] = field(default_factory=list)
    slack: SlackState | None = None
    github: GitHubState | None = None
    # An app.yaml naming the demo's database, for `keel tasks show` and `keel serve` after it.
    config_path: Path | None = None


@dataclass(frozen=True, slots=True)
class DemoSecrets:
    signing_secret: str = SIGNING_SECRET
    bot_token: str = BOT_TOKEN
    github_token: str = GITHUB_TOKEN
    webhook_secret: str = WEBHOOK_SECRET


def demo_tree(
    workdir: Path,
    db_url: str,
    slack_url: str,
    github_url: str,
    bare: Path,
    secrets: DemoSecrets = DemoSecrets(),
) -> dict[str, Any]:
    """The demo's configuration tree (also what the live tests start from)."""
    script = (Path(__file__).with_name("script.yaml")).read_text()
    script_path = workdir / "script.yaml"
    script_path.write_text(script.replace("{python}", sys.executable))
    return {
        "database": {"url": db_url},
        "server": {"host": "127.0.0.1", "port": 0},
        "slack": {
            "bot_token": secrets.bot_token,
            "signing_secret": secrets.signing_secret,
            "api_url": slack_url + "/api/",
        },
        "github": {
            "token": secrets.github_token,
            "webhook_secret": secrets.webhook_secret,
            "api_url": github_url,
            "bot_login": "keel-bot",
        },
        "model": {"provider": "scripted", "script": str(script_path)},
        "workspace": {
            "root": str(workdir / "workspaces"),
            # The demo's repository is its own sample: on a machine without bubblewrap it
            # runs unsandboxed, by this explicit choice, rather than not at all.
            "sandbox": "auto" if shutil.which("bwrap") else "none",
            "repositories": {REPO: {"url": bare.as_uri(), "ref": "main"}},
        },
        "routing": {"channel_repos": {CHANNEL: REPO}, "default_repo": REPO},
        "worker": {"concurrency": 2, "poll_interval_s": 0.2, "lease_seconds": 10},
    }


def demo_config(
    workdir: Path,
    db_url: str,
    slack_url: str,
    github_url: str,
    bare: Path,
    *,
    socket_mode: bool = False,
) -> AppConfig:
    tree = demo_tree(workdir, db_url, slack_url, github_url, bare)
    if socket_mode:
        tree["slack"]["app_token"] = APP_TOKEN
    return build_config(tree, env={})


def _envelope(event: dict[str, Any], team: str) -> dict[str, Any]:
    return {
        "token": "unused",
        "team_id": team,
        "api_app_id": "A0KEELAPP1",
        "type": "event_callback",
        "event_id": "Ev" + uuid.uuid4().hex[:10].upper(),
        "event_time": int(time.time()),
        "event": event,
    }


Send = Callable[[dict[str, Any], str], Awaitable[None]]


def http_sender(keel_url: str) -> Send:
    """Events as Slack's Events API sends them: signed POSTs to /slack/events."""

    async def send(event: dict[str, Any], team: str) -> None:
        request = sign_slack(_envelope(event, team), SIGNING_SECRET)
        [response] = await deliver(keel_url + "/slack/events", request)
        if response.status_code != 200:
            raise RuntimeError(f"Keel refused the Slack event: {response.status_code}")

    return send


def socket_sender(hub: SocketHub) -> Send:
    """Events as Socket Mode sends them: envelopes on Keel's websocket, each acknowledged."""

    async def send(event: dict[str, Any], team: str) -> None:
        envelope_id = hub.send(_envelope(event, team))
        acked = await asyncio.to_thread(hub.wait, lambda: hub.is_acked(envelope_id))
        if not acked:
            raise RuntimeError(f"Keel did not acknowledge envelope {envelope_id}")

    return send


class _Watcher:
    """Reads progress from the database and the emulators and prints what changed."""

    def __init__(self, db: Database, slack: SlackState, echo: Echo) -> None:
        self.db, self.slack, self.echo = db, slack, echo
        self.seen_phase: str | None = None
        self.seen_calls: set[str] = set()
        self.seen_posts: dict[str, str] = {}

    async def task_for(self, objective: str) -> str | None:
        row = await self.db.read(lambda s: q.latest_by_objective(s, objective))
        return row.task_id if row else None

    async def report(self, task_id: str) -> tuple[Any, Any]:
        run = await self.db.read(lambda s: executions.load_run(s, task_id))
        calls = await self.db.read(lambda s: tool_calls.all_calls(s, task_id))
        if run is not None and run.phase != self.seen_phase:
            self.seen_phase = run.phase
            self.echo(f"  · phase {run.phase} (turn {run.turn})")
        for call in calls:
            if call.outcome and call.call_id not in self.seen_calls:
                self.seen_calls.add(call.call_id)
                self.echo(f"  · tool {call.name}: {call.outcome}")
        for message in self.slack.bot_posts(CHANNEL):
            if self.seen_posts.get(message.ts) != message.text:
                verb = "edited" if message.ts in self.seen_posts else "posted"
                self.seen_posts[message.ts] = message.text
                text = as_people_see(self.slack, message.text)
                first = text.splitlines()[0] if text else ""
                self.echo(f"  · keel {verb} in the thread: {first}")
        task = await self.db.read(lambda s: q.get_task(s, task_id))
        return run, task


def _play_ci(github: GitHubState, started: dict[str, float]) -> None:
    """CI for each pull request: running first, then green a moment later."""
    repo = github.repos[REPO]
    for pull in repo.pulls.values():
        sha = pull.head_sha
        if sha not in started:
            started[sha] = time.monotonic()
            github.set_checks(REPO, sha, [("tests", "in_progress"), ("lint", "queued")])
        elif time.monotonic() - started[sha] > 1.5 and repo.checks[sha][0].status != "completed":
            github.set_checks(REPO, sha, [("tests", "success"), ("lint", "success")])


def as_people_see(slack: SlackState, text: str) -> str:
    """A message as Slack shows it: ``<@U0KEELBOT1>`` reads ``@keel``, each user by name."""
    return plain_text(text, {user_id: user.name for user_id, user in slack.users.items()})


def render_thread(slack: SlackState, root_ts: str) -> list[str]:
    lines = []
    for message in slack.thread(CHANNEL, root_ts):
        author = slack.users.get(message.user)
        name = "keel" if message.bot_id else (author.name if author else message.user)
        reactions = " ".join(f":{r}:" for r in message.reactions)
        text = as_people_see(slack, message.text)
        lines.append(f"{name}: {text}" + (f"   [{reactions}]" if reactions else ""))
    return lines


def _check(slack: SlackState, root_ts: str, posts: list[Any]) -> list[str]:
    problems = []
    # Keel acknowledges each message it took where it was said: the mention (and the
    # follow-up), never the report at the root, and never twice.
    thread = slack.thread(CHANNEL, root_ts)
    eyes = {m.ts: m.reactions.get("eyes") for m in thread if m.reactions.get("eyes")}
    mention = next((m for m in thread if m.text.startswith(f"<@{slack.bot_user_id}>")), None)
    if mention is None or eyes.get(mention.ts) != [slack.bot_user_id]:
        problems.append("expected one 👀 from keel on the mention")
    if root_ts in eyes or any(who != [slack.bot_user_id] for who in eyes.values()):
        problems.append("expected 👀 only on the messages keel took, once each")
    replies = [m for m in slack.thread(CHANNEL, root_ts) if m.bot_id]
    completion = [m for m in replies if m.text.startswith(("✅", "⚠️", "❌", "🛑", "⏹", "⌛"))]
    progress = [m for m in replies if m.text.startswith("⏳")]
    if len(completion) != 1:
        problems.append(f"expected one completion reply, found {len(completion)}")
    if len(progress) != 1:
        problems.append(f"expected one progress message, found {len(progress)}")
    text = completion[0].text if completion else ""
    for needle in ("PR #", "read back from GitHub", "Commit ", "exit 0", "CI: ", "verified"):
        if needle not in text:
            problems.append(f"completion reply lacks {needle!r}")
    if not any(p.purpose == "completion" and p.state == "landed" for p in posts):
        problems.append("the completion post did not land")
    return problems


def _mention_event(slack: SlackState, ts: str, root_ts: str, kind: str) -> dict[str, Any]:
    text = f"<@{slack.bot_user_id}> {MENTION}"
    return {
        "type": kind,
        "user": PERSON[0],
        "text": text,
        "ts": ts,
        "thread_ts": root_ts,
        "channel": CHANNEL,
        "event_ts": ts,
        "channel_type": "channel",
    }


Inspect = Callable[[str, str], Awaitable[None]]


def missing_prerequisites() -> list[str]:
    """What this machine lacks for the demo, each named with how to get it.

    ``pip install keel-bot`` brings every Python package the demo uses (its sample's tests use
    the standard library's unittest); git is the one program it needs from the system.
    bubblewrap is optional: without it the sample's commands run unsandboxed.
    """
    if shutil.which("git") is None:
        return ["keel demo needs git on PATH (Debian/Ubuntu: apt-get install git)"]
    return []


def _why_failed(task: Any, calls: list[Any]) -> list[str]:
    """The task's own account of a failure, and the end of its last command's output: what a
    person needs to see what was missing (a module, a program), not just that a step failed."""
    if task is None or task.status == "succeeded":
        return []
    summary = (task.result or {}).get("summary") or ""
    lines = [f"the task ended {task.status.value}" + (f": {summary}" if summary else "")]
    commands = [c for c in calls if c.name == "run_command" and c.result]
    if commands:
        output = str(commands[-1].result.get("output", "")).strip().splitlines()
        lines.append("its last command's output ended with:")
        lines += [f"    {line}" for line in output[-8:]]
    return lines


async def run_demo(
    workdir: Path,
    *,
    db_url: str | None = None,
    echo: Echo = print,
    timeout_s: float = 180,
    inspect: Inspect | None = None,
    socket_mode: bool = False,
    review: bool = True,
) -> DemoResult:
    """Run the scenario, then (``review``) the review step; ``inspect(keel_url, task_id)``
    runs before Keel shuts down."""
    missing = missing_prerequisites()
    if missing:
        return DemoResult(False, None, [], missing)
    workdir.mkdir(parents=True, exist_ok=True)
    db_url = db_url or f"sqlite:///{workdir / 'keel.db'}"
    bare = create_sample_repo(workdir / "origin")
    slack, github = SlackState(), GitHubState()
    slack.add_user(*PERSON, real_name="Dana")
    github.add_token(GITHUB_TOKEN, "keel-bot")
    github.add_repo(REPO).resolve_branch = lambda branch: branch_head(bare, branch)
    servers: list[RunningServer] = []
    hub = SocketHub(app_id=slack.app_id).start() if socket_mode else None
    slack.socket = hub
    try:
        servers += [serve(create_slack_app(slack)), serve(create_github_app(github))]
        config = demo_config(
            workdir, db_url, servers[0].url, servers[1].url, bare, socket_mode=socket_mode
        )
        keel = serve(create_app(config), lifespan="on")
        servers.append(keel)
        transport = "Socket Mode" if hub else "HTTP events"
        echo(
            f"Keel is up at {keel.url}, Slack over {transport} (Slack and GitHub emulators at "
            f"{servers[0].url}, {servers[1].url})"
        )
        send = socket_sender(hub) if hub else http_sender(keel.url)
        result = await _drive(workdir, db_url, keel.url, send, slack, github, echo, timeout_s)
        if review and result.ok:
            problems = await review_step(
                keel.url, db_url, github, repo=REPO, webhook_secret=WEBHOOK_SECRET, echo=echo
            )
            result = replace(result, ok=not problems, problems=problems)
        if inspect is not None and result.task_id is not None:
            await inspect(keel.url, result.task_id)
        return replace(result, config_path=_afterwards_config(workdir, db_url))
    finally:
        for server in reversed(servers):
            server.stop()
        if hub is not None:
            hub.stop()


async def _drive(
    workdir: Path,
    db_url: str,
    keel_url: str,
    send: Send,
    slack: SlackState,
    github: GitHubState,
    echo: Echo,
    timeout_s: float,
) -> DemoResult:
    # The report is posted before Keel is asked: only the task brief brings it to the model.
    root_ts = slack.seed_message(CHANNEL, REPORT, user=PERSON[0])
    echo(f"dana: {REPORT}")
    text = f"<@{slack.bot_user_id}> {MENTION}"
    ts = slack.seed_message(CHANNEL, text, user=PERSON[0], thread_ts=root_ts)
    echo(f"dana (in the thread): @keel {MENTION}")
    # Slack sends both events for one mention; Keel must make one task of them.
    await send(_mention_event(slack, ts, root_ts, "app_mention"), slack.team_id)
    await send(_mention_event(slack, ts, root_ts, "message"), slack.team_id)
    db = Database.from_url(db_url)
    watcher = _Watcher(db, slack, echo)
    objective = f"slack:{slack.team_id}/{CHANNEL}/{root_ts}"
    task_id: str | None = None
    followed_up = False
    ci: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            task_id = task_id or await watcher.task_for(objective)
            if task_id is not None:
                run, task = await watcher.report(task_id)
                if not followed_up and run is not None and run.turn >= 1:
                    followed_up = await _follow_up(send, slack, root_ts, echo)
                _play_ci(github, ci)
                posts = await _posts(db, task_id)
                if task.status in ("succeeded", "failed", "canceled", "timed_out") and any(
                    p.purpose == "completion" and p.state in ("landed", "undelivered")
                    for p in posts
                ):
                    await asyncio.sleep(3.5)  # let the last progress edit land
                    break
            await asyncio.sleep(0.2)
        posts = await _posts(db, task_id) if task_id else []
        ended = await db.read(lambda s: q.get_task(s, task_id)) if task_id else None
        calls = await db.read(lambda s: tool_calls.all_calls(s, task_id)) if task_id else []
    finally:
        db.close()
    thread = render_thread(slack, root_ts)
    problems = _check(slack, root_ts, posts) if task_id else ["no task was created"]
    if problems:
        problems += _why_failed(ended, calls)
    return DemoResult(not problems, task_id, thread, problems, slack, github)


async def _posts(db: Database, task_id: str) -> list[Any]:
    return await db.read(lambda s: posts_of_task(s, task_id))


async def _follow_up(send: Send, slack: SlackState, root_ts: str, echo: Echo) -> bool:
    ts = slack.seed_message(CHANNEL, FOLLOW_UP, user=PERSON[0], thread_ts=root_ts)
    echo(f"dana (in the thread, mid-run): {FOLLOW_UP}")
    event = {
        "type": "message",
        "user": PERSON[0],
        "text": FOLLOW_UP,
        "ts": ts,
        "thread_ts": root_ts,
        "channel": CHANNEL,
        "event_ts": ts,
        "channel_type": "channel",
    }
    await send(event, slack.team_id)
    return True


def _afterwards_config(workdir: Path, db_url: str) -> Path:
    """``workdir/app.yaml``: the demo's database and workspaces, no surface and no secret, so
    the CLI and the task UI can read the task once the demo's Keel and emulators are gone."""
    path = workdir / "app.yaml"
    path.write_text(
        "# Written by keel demo: its database, to look at its task after it ended.\n"
        + yaml.safe_dump(
            {"database": {"url": db_url}, "workspace": {"root": str(workdir / "workspaces")}},
            sort_keys=False,
        )
    )
    return path


def closing_lines(result: DemoResult) -> list[str]:
    """How to see the task again: the demo's Keel has stopped, so its UI address is dead."""
    if result.task_id is None or result.config_path is None:
        return []
    config = shlex.quote(str(result.config_path))
    return [
        "Keel and the emulators have stopped; the task stays in the demo's database:",
        f"  keel tasks show {result.task_id} --config {config}",
        f"  keel serve --config {config}   then open "
        f"http://127.0.0.1:8080/ui/tasks/{result.task_id}",
    ]


def print_thread(result: DemoResult, echo: Echo = print) -> None:
    echo("\n──── the Slack thread, as a person sees it ────")
    for line in result.thread:
        echo(line)
    echo("───────────────────────────────────────────────")


__all__ = [
    "DemoResult",
    "SlackMessage",
    "as_people_see",
    "closing_lines",
    "print_thread",
    "render_thread",
    "run_demo",
]
