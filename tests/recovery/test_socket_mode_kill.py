"""SIGKILL a Socket Mode ``keel serve`` before and after it commits an envelope's Signal.

Slack (the emulator, in this process) keeps the envelope unacknowledged and sends it again
to the next connection. Whether the process died before the commit or between the commit and
the ack, after a restart the mention is one Signal, one task and one 👀, and the envelope is
acknowledged: nothing lost, nothing twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.emulators.slack_socket import SocketHub
from runtime.store.engine import Database
from runtime.store.models import OutboxRow, SignalRow, TaskRow

ROOT = Path(__file__).resolve().parents[2]
APP_TOKEN = "xapp-kill-test"
BOT_TOKEN = "xoxb-keel-emulated"
CHANNEL = "C0KEELGEN1"


def _config(tmp_path: Path, db_url: str, slack_url: str) -> Path:
    tree = {
        "database": {"url": db_url},
        "server": {"host": "127.0.0.1", "port": 0},
        "slack": {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "api_url": slack_url + "/api/"},
        "workspace": {"root": str(tmp_path / "workspaces")},
        "worker": {"poll_interval_s": 0.2},
    }
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _serve(config: Path, fault: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEL_", "SLACK_"))}
    if fault:
        env["KEEL_FAULT"] = fault
    command = [sys.executable, "-c", "from adapters.cli import main; main()"]
    command += ["serve", "--config", str(config)]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _envelope(slack: SlackState, ts: str) -> dict[str, object]:
    event = {
        "type": "app_mention",
        "user": "U0DEMODANA",
        "text": f"<@{slack.bot_user_id}> fix the build",
        "ts": ts,
        "channel": CHANNEL,
        "event_ts": ts,
    }
    return {
        "team_id": slack.team_id,
        "api_app_id": slack.app_id,
        "type": "event_callback",
        "event_id": "Ev" + uuid.uuid4().hex[:10].upper(),
        "event_time": int(time.time()),
        "event": event,
    }


def _state(db_url: str) -> tuple[int, int, int]:
    db = Database.from_url(db_url)
    try:
        signals = db.read_sync(lambda s: list(s.scalars(select(SignalRow))))
        tasks = db.read_sync(lambda s: list(s.scalars(select(TaskRow))))
        acks = db.read_sync(
            lambda s: list(s.scalars(select(OutboxRow).where(OutboxRow.purpose == "ack")))
        )
    finally:
        db.close()
    return len(signals), len(tasks), len(acks)


@pytest.mark.parametrize("point", ["intake:received", "intake:committed"])
def test_mention_is_one_task_when_keel_dies_before_or_after_commit_but_before_ack(
    db_url: str, tmp_path: Path, point: str
) -> None:
    slack = SlackState()
    slack.app_tokens.add(APP_TOKEN)
    with SocketHub(app_id=slack.app_id, ack_timeout_s=30) as hub, serve(
        create_slack_app(slack)
    ) as emulator:
        slack.socket = hub
        config = _config(tmp_path, db_url, emulator.url)
        doomed = _serve(config, fault=point)
        try:
            assert hub.wait(lambda: hub.connected() == 1, timeout_s=60), "no connection"
            ts = slack.seed_message(CHANNEL, "fix the build", user="U0DEMODANA")
            envelope_id = hub.send(_envelope(slack, ts))
            assert doomed.wait(timeout=60) == -signal.SIGKILL
        finally:
            doomed.kill()
        assert not hub.is_acked(envelope_id)
        committed = _state(db_url)
        assert committed == ((0, 0, 0) if point == "intake:received" else (1, 1, 1))

        survivor = _serve(config, fault=None)
        try:
            # The next connection gets the unacknowledged envelope again, and acknowledges it.
            assert hub.wait(lambda: hub.is_acked(envelope_id), timeout_s=60), "never acked"
            assert hub.attempts(envelope_id) == 2
            assert _state(db_url) == (1, 1, 1)
        finally:
            survivor.send_signal(signal.SIGTERM)
            survivor.wait(timeout=30)
