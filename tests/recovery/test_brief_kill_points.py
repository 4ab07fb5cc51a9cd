"""SIGKILL a worker at every boundary of building the brief, restart it, check the brief.

The brief is gathered from a real Slack emulator by the real context source. Killed before
the brief's transcript item commits, the restarted worker gathers again; killed after, it
never does: ``conversations.replies`` was read exactly once, and there is exactly one brief
item, which the model saw.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from adapters.emulators.corpus import load_slack_event
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.slack.signals import signal_from_slack_event
from routing.config import DaemonsConfig, RoutingConfig
from routing.intake import Router
from routing.policy import RoutingPolicy
from routing.signal import Signal
from runtime.scheduler import Scheduler
from runtime.store import executions, transcripts
from runtime.store.engine import Database
from runtime.store.records import TaskStatus
from tests.recovery.brief_main import IDENTITY, REPORT

ROOT = Path(__file__).resolve().parents[2]
CHANNEL = "C0KEELGEN1"
# Before the item commits (gathered, then the commit of load_context), and just after it.
POINTS = ("brief:gathered#1", "commit:load_context#1", "commit:check_scheduler#1")


@contextmanager
def _slack() -> Iterator[tuple[SlackState, str, Signal]]:
    """The emulator with a thread: Alice's report, then a mention of Keel in its thread."""
    state = SlackState()
    state.add_user("U0ALICE001", "alice")
    state.add_user("U0DEMODANA", "dana")
    root = state.seed_message(CHANNEL, REPORT, user="U0ALICE001")
    text = f"<@{state.bot_user_id}> can you fix it?"
    ts = state.seed_message(CHANNEL, text, user="U0DEMODANA", thread_ts=root)
    with serve(create_slack_app(state)) as server:
        yield state, server.url, _signal(text, ts, root)


def _signal(text: str, ts: str, root: str) -> Signal:
    envelope = load_slack_event(
        "app_mention",
        **{
            "team_id": IDENTITY.team_id,
            "event.text": text,
            "event.user": "U0DEMODANA",
            "event.ts": ts,
            "event.event_ts": ts,
            "event.thread_ts": root,
            "event.channel": CHANNEL,
        },
    )
    signal = signal_from_slack_event(envelope, IDENTITY, received_at=datetime.now(UTC))
    assert isinstance(signal, Signal), signal
    return signal


async def _start_task(db_url: str, signal: Signal) -> str:
    db = Database.from_url(db_url)
    try:
        policy = RoutingPolicy.from_config(RoutingConfig(), DaemonsConfig())
        router = Router(Scheduler(db), db, policy)
        result = await router.ingest(
            signal, provider="slack", delivery_id=signal.delivery_id, raw_kind="app_mention"
        )
        assert result.task_id is not None, result
        return result.task_id
    finally:
        db.close()


def _spawn(db_url: str, folder: Path, slack_url: str, fault: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_FAULT")}
    if fault:
        env["KEEL_FAULT"] = fault
    command = [sys.executable, "-m", "tests.recovery.brief_main", db_url, str(folder), slack_url]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=(folder / "worker.err").open("ab"),
    )


async def _run(db_url: str, folder: Path, slack_url: str, task_id: str, fault: str | None) -> bool:
    """Run the task to its end, restarting a killed worker; True if it was killed."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stop").unlink(missing_ok=True)
    db = Database.from_url(db_url)
    worker, killed = _spawn(db_url, folder, slack_url, fault), False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                killed = True
                worker = _spawn(db_url, folder, slack_url, None)
            run = await db.read(lambda s: executions.load_run(s, task_id))
            if run is not None and run.phase == "done":
                return killed
            await asyncio.sleep(0.05)
        raise TimeoutError((folder / "worker.err").read_text()[-2000:])
    finally:
        (folder / "stop").write_text("")
        worker.wait(timeout=15)
        db.close()


async def _outcome(db_url: str, task_id: str) -> tuple[TaskStatus, list[str]]:
    db = Database.from_url(db_url)
    try:
        task = await Scheduler(db).get(task_id)
        entries = await db.read(lambda s: transcripts.transcript(s, task_id))
    finally:
        db.close()
    assert task is not None
    return task.status, [e.item_key for e in entries if e.kind == "brief"]


async def test_brief_is_built_once_and_never_again_once_stored_when_the_worker_is_killed(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    for index, point in enumerate(POINTS):
        with _slack() as (state, slack_url, mention):
            db_url = db_factory()
            task_id = await _start_task(db_url, mention)
            killed = await _run(db_url, tmp_path / f"kill{index}", slack_url, task_id, point)
            status, briefs = await _outcome(db_url, task_id)
            reads = len(state.requests_to("GET", "/api/conversations.replies")) + len(
                state.requests_to("POST", "/api/conversations.replies")
            )
        assert killed, f"{point} was not reached"
        assert status is TaskStatus.succeeded, point
        assert briefs == [f"brief:{task_id}"], point
        stored_before_kill = point != "brief:gathered#1"
        assert reads == (1 if stored_before_kill else 2), (point, reads)
