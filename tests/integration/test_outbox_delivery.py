"""The answer always lands: a refused post is retried for ``deliver_for_s`` (across restarts),
then goes to the fallback, else shows as undelivered; a task's posts land in order."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request

from adapters.config import SlackConfig, build_config
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.slack.surface import SlackSurface, fetch_slack_identity, slack_client
from adapters.slack.workspaces import WebSessions
from adapters.web.metrics import build_metrics
from adapters.web.ui import build_ui
from runtime.clock import ManualClock
from runtime.errors import Retryable
from runtime.outbox import OutboxDispatcher
from runtime.reporting import ThreadReporter
from runtime.scheduler import Scheduler
from runtime.store import outbox
from runtime.store.engine import Database
from runtime.store.outbox import OutboxPost
from runtime.store.records import Task, TaskResult, TaskStatus
from runtime.surfaces import Action
from runtime.threads import GitHubIssue, Landed, SlackChannel, SlackThread, ThreadRef
from tests.factories import make_spec
from tests.integration.test_outbox import ORIGIN, FakeSurface

ROOT = Path(__file__).resolve().parents[2]
CHANNEL = "C0KEELGEN1"


async def _task(db: Database, clock: ManualClock, origin: ThreadRef = ORIGIN) -> Task:
    scheduler = Scheduler(db, clock=clock)
    spec = make_spec(origin_thread_ref=origin, objective_key=str(origin))
    return (await scheduler.transact(scheduler.schedule, spec)).task


def _queue(db: Database, task_id: str, clock: ManualClock, key: str = "k") -> None:
    db.run_sync(
        lambda s: outbox.enqueue_post(
            s, task_id=task_id, purpose="completion", thread=ORIGIN, key=key, action="post",
            body="the result", now=clock.now(),
        )
    )


async def _rounds(dispatcher: OutboxDispatcher, clock: ManualClock, seconds: float) -> None:
    """Run the outbox once a second of fake time for ``seconds``."""
    for _ in range(int(seconds)):
        await dispatcher.run_once()
        clock.advance(1)


def _posts(db: Database, task_id: str) -> list[OutboxPost]:
    return db.run_sync(lambda s: outbox.posts_of_task(s, task_id))


async def test_a_refused_post_is_retried_until_deliver_for_s_then_goes_to_the_fallback(
    database: Database,
) -> None:
    clock = ManualClock()
    origin = FakeSurface(fail_with=Retryable("Slack ratelimited (HTTP 429)"))
    fallback = FakeSurface(name="github")
    dispatcher = OutboxDispatcher(
        database, {"slack": origin, "github": fallback}, clock,
        deliver_for_s=600, fallback=GitHubIssue("acme/ops", 1),
    )
    task = await _task(database, clock)
    _queue(database, task.task_id, clock)
    await _rounds(dispatcher, clock, 599)
    [row] = _posts(database, task.task_id)
    assert fallback.posts == [] and row.state == "sending"
    assert 8 < row.attempts < 20  # backoff: far fewer tries than seconds, more than 8
    await _rounds(dispatcher, clock, 2)
    [(thread, text, _)] = fallback.posts
    assert thread == GitHubIssue("acme/ops", 1)
    assert text.startswith(f"(Could not post in {ORIGIN}: still failing after 600 s and ")
    assert "Slack ratelimited (HTTP 429)" in text and text.endswith("the result")
    [row] = _posts(database, task.task_id)
    assert row.state == "landed" and str(row.landed_on).startswith("fallback:github:")


async def test_time_to_deliver_counts_from_queueing_when_the_outbox_restarts(
    database: Database,
) -> None:
    clock = ManualClock()
    refusing = FakeSurface(fail_with=Retryable("Slack internal_error (HTTP 500)"))
    task = await _task(database, clock)
    _queue(database, task.task_id, clock)
    await OutboxDispatcher(database, {"slack": refusing}, clock, deliver_for_s=600).run_once()
    clock.advance(3600)  # Keel is down for an hour; a new process starts its outbox
    restarted = OutboxDispatcher(database, {"slack": refusing}, clock, deliver_for_s=600)
    await restarted.run_once()
    [row] = _posts(database, task.task_id)
    assert row.state == "undelivered" and row.attempts == 2
    assert "still failing after 600 s and 2 attempts" in (row.last_error or "")


async def test_an_undelivered_post_shows_in_the_cli_the_ui_and_metrics(
    db_url: str, tmp_path: Path
) -> None:
    database = Database.from_url(db_url)
    clock = ManualClock()
    refusing = FakeSurface(fail_with=Retryable("Slack ratelimited (HTTP 429)"))
    dispatcher = OutboxDispatcher(database, {"slack": refusing}, clock, deliver_for_s=30)
    task = await _task(database, clock)
    _queue(database, task.task_id, clock)
    await _rounds(dispatcher, clock, 40)
    assert [p.state for p in _posts(database, task.task_id)] == ["undelivered"]

    shown = subprocess.run(
        [sys.executable, "-c", "from adapters.cli import main; main()",
         "tasks", "show", task.task_id],
        env={**os.environ, "PYTHONPATH": str(ROOT), "KEEL_DATABASE_URL": db_url},
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"completion: UNDELIVERED to {ORIGIN}" in shown.stdout
    assert "still failing after 30 s" in shown.stdout

    async def anyone(request: Request) -> None:
        return None

    app = FastAPI()
    app.include_router(build_ui(database, auth=anyone))
    app.include_router(build_metrics(database))
    with serve(app) as running:
        async with httpx.AsyncClient(base_url=running.url) as http:
            page = (await http.get(f"/ui/tasks/{task.task_id}")).text
            scraped = (await http.get("/metrics")).text
    assert "1 undelivered" in page and 'data-state="undelivered"' in page
    assert "keel_outbox_undelivered 1.0" in scraped
    database.close()


@dataclass
class _Flaky(FakeSurface):
    """Refuses progress messages and edits (retryably) while ``refuse`` (edits also while
    ``refuse_edits``); takes anything else."""

    refuse: bool = True
    refuse_edits: bool = False

    async def post(
        self, thread: ThreadRef, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> ThreadRef:
        if self.refuse and key.endswith(":progress"):
            raise Retryable("Slack ratelimited (HTTP 429)", retry_after_s=5)
        return await super().post(thread, text, key=key, actions=actions)

    async def update(
        self, posted: ThreadRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
        if self.refuse or self.refuse_edits:
            raise Retryable("Slack ratelimited (HTTP 429)", retry_after_s=5)
        await super().update(posted, text, actions=actions)


async def test_progress_and_its_last_edit_land_before_the_completion_when_posts_were_retried(
    database: Database,
) -> None:
    clock = ManualClock()
    surface = _Flaky()
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock)
    task = await _task(database, clock)
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
    await _rounds(dispatcher, clock, 10)  # the progress message is refused
    result = TaskResult(TaskStatus.succeeded, "fixed")
    database.run_sync(lambda s: reporter.on_finished(s, task, result))
    await _rounds(dispatcher, clock, 30)
    assert surface.posts == []  # the completion waited behind the progress message
    surface.refuse = False
    await _rounds(dispatcher, clock, 30)
    assert [text[:1] for _, text, _ in surface.posts] == ["⏳", "✅"]
    # The progress message landed with its last text already, or was edited before the reply.
    assert "finished" in surface.posts[0][1] or surface.updates
    assert all(p.state == "landed" for p in _posts(database, task.task_id))


async def test_the_progress_edit_lands_before_the_completion_when_the_edit_is_refused(
    database: Database,
) -> None:
    clock = ManualClock()
    surface = _Flaky(refuse=False)
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock)
    task = await _task(database, clock)
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
    await _rounds(dispatcher, clock, 5)
    surface.refuse_edits = True
    result = TaskResult(TaskStatus.succeeded, "fixed")
    database.run_sync(lambda s: reporter.on_finished(s, task, result))
    await _rounds(dispatcher, clock, 60)
    assert [text[:1] for _, text, _ in surface.posts] == ["⏳"]  # the reply waits
    surface.refuse_edits = False
    await _rounds(dispatcher, clock, 15)
    assert [text[:1] for _, text, _ in surface.posts] == ["⏳", "✅"]
    [(_, edited)] = surface.updates
    assert "finished" in edited


async def test_the_last_progress_edit_is_made_at_once_when_the_completion_waits_for_it(
    database: Database,
) -> None:
    clock = ManualClock()
    surface = FakeSurface()
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock, edit_interval_s=3)
    task = await _task(database, clock)
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
    await dispatcher.run_once()
    result = TaskResult(TaskStatus.succeeded, "fixed")
    database.run_sync(lambda s: reporter.on_finished(s, task, result))
    await dispatcher.run_once()  # within the edit interval: the edit goes first, at once
    await dispatcher.run_once()
    [(_, edited)] = surface.updates
    assert "finished" in edited
    assert [text[:1] for _, text, _ in surface.posts] == ["⏳", "✅"]


async def test_reply_lands_once_after_progress_when_slack_answers_429_for_two_minutes(
    database: Database,
) -> None:
    slack = SlackState()
    root_ts = slack.seed_message(CHANNEL, "<@U0KEELBOT1> fix the build", user="U1")
    origin = SlackThread(slack.team_id, CHANNEL, root_ts)
    with serve(create_slack_app(slack)) as running:
        surface = await _emulated_slack(running.url)
        clock = ManualClock()
        dispatcher = OutboxDispatcher(database, {"slack": surface}, clock)
        task = await _task(database, clock, origin)
        reporter = ThreadReporter(clock)
        slack.inject("*", "429", times=10_000, retry_after=5)
        before = len(slack.requests)
        database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
        database.run_sync(
            lambda s: reporter.on_finished(s, task, TaskResult(TaskStatus.succeeded, "fixed"))
        )
        await _rounds(dispatcher, clock, 120)
        refused = len(slack.requests) - before
        for fault in slack.fault_plan.faults:
            fault.remaining = 0  # Slack answers 200 again
        await _rounds(dispatcher, clock, 30)
    assert 10 < refused < 40  # retried all along, as Retry-After asked
    replies = [m for m in slack.thread(CHANNEL, root_ts) if m.bot_id]
    assert [m.text[:1] for m in replies] == ["⏳", "✅"], [m.text for m in replies]
    assert "finished" in replies[0].text  # the progress message's last edit landed too
    posts = {p.purpose: p for p in _posts(database, task.task_id)}
    assert posts["completion"].state == posts["progress"].state == "landed"
    assert posts["completion"].landed_on == Landed(origin.message(replies[1].ts))
    assert posts["completion"].attempts == 1  # held back in order, then sent once


@pytest.mark.parametrize("channel", ["C0FALLBACK", "#keel-ops"])
async def test_replies_a_dead_origin_refuses_start_one_thread_per_task_in_a_fallback_channel(
    database: Database, channel: str
) -> None:
    slack = SlackState()
    slack.add_channel("C0FALLBACK", "keel-ops")
    gone = SlackThread(slack.team_id, "C0ARCHIVED", "1700000000.000100")  # no such channel
    config = build_config(
        {"reporting": {"fallback": {"surface": "slack", "thread_ref": channel}}}, {}
    )
    assert config.reporting.fallback is not None
    with serve(create_slack_app(slack)) as running:
        surface = await _emulated_slack(running.url)
        clock = ManualClock()
        dispatcher = OutboxDispatcher(
            database, {"slack": surface}, clock, fallback=config.reporting.fallback.target
        )
        tasks = [await _task(database, clock, gone) for _ in range(2)]
        reporter = ThreadReporter(clock)
        for task in tasks:
            database.run_sync(partial(reporter.on_phase, task=task, phase="call_model", detail=""))
            result = TaskResult(TaskStatus.succeeded, f"fixed {task.task_id}")
            database.run_sync(partial(reporter.on_finished, task=task, result=result))
        await _rounds(dispatcher, clock, 10)
    tops = {m.ts: m for m in slack.messages if m.channel == "C0FALLBACK" and not m.thread_ts}
    assert len(tops) == 2  # one top-level message per task, each its progress message
    note = f"(Could not post in {gone}: Slack channel_not_found (HTTP 200))"
    for task in tasks:
        posts = {p.purpose: p for p in _posts(database, task.task_id)}
        progress = posts["progress"].landed_on
        assert isinstance(progress, Landed) and progress.fallback
        assert isinstance(progress.message, SlackThread)
        top = tops[progress.message.thread_ts]
        assert top.text.startswith(note) and "⏳" in top.text
        [reply] = [m for m in slack.thread("C0FALLBACK", top.ts) if m.ts != top.ts]
        assert reply.text.startswith(note) and f"fixed {task.task_id}" in reply.text
        root = SlackThread(slack.team_id, "C0FALLBACK", top.ts)
        assert progress.message == root.message(top.ts)
        assert posts["completion"].landed_on == Landed(root.message(reply.ts), fallback=True)


async def _emulated_slack(url: str) -> SlackSurface:
    config = SlackConfig(
        bot_token="xoxb-keel-emulated", signing_secret="unused", api_url=url + "/api/"
    )
    client = slack_client(config, WebSessions(), timeout_s=5)
    return SlackSurface.single(client, await fetch_slack_identity(client))


async def test_a_thread_started_in_a_fallback_channel_pings_only_allowed_people() -> None:
    slack = SlackState()
    slack.add_channel("C0FALLBACK", "keel-ops")
    with serve(create_slack_app(slack)) as running:
        plain = await _emulated_slack(running.url)
        surface = SlackSurface(plain.clients, allowed_mentions=("U0OPS",))
        text = "<@U0OPS> and <@U0OTHER> and <!channel>"
        posted = await surface.start_thread(SlackChannel("#keel-ops"), text, key="t1:completion")
    assert posted == SlackThread(slack.team_id, "C0FALLBACK", posted.thread_ts, posted.thread_ts)
    [message] = slack.bot_posts("C0FALLBACK")
    assert message.thread_ts is None  # a top-level message: a thread of its own
    assert "<@U0OPS>" in message.text
    assert "&lt;@U0OTHER&gt;" in message.text and "&lt;!channel&gt;" in message.text
