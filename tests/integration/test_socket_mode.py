"""Slack over Socket Mode: slack-bolt's real asyncio client against the emulator's websocket.

The same bolt app serves HTTP and Socket Mode, so the corpus events make the same Signals
either way; an envelope is acknowledged only after its Signal is committed, so a dropped ack
or a failing store means a redelivery, and a redelivery makes nothing twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from adapters.emulators.corpus import corpora_root, load_slack_event
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.emulators.slack_socket import SocketHub
from adapters.emulators.webhooks import sign_slack
from adapters.slack.app import SlackEvents
from adapters.slack.bolt import build_bolt_app
from adapters.slack.signals import SlackIdentity
from adapters.slack.socket_mode import SlackSocketMode
from adapters.slack.workspaces import SingleWorkspace, WebSessions
from adapters.web.ingress import create_ingress_router, install_ingress
from routing.signal import Ignored, Signal
from runtime.clock import SystemClock
from runtime.errors import Retryable
from runtime.store.engine import Database
from runtime.store.models import OutboxRow, SignalRow, TaskRow
from tests.integration.keel_live import live_keel
from tests.sinks import RecordingSink

SECRET = "socket-signing-secret"
APP_TOKEN = "xapp-keel-emulated"
IDENTITY = SlackIdentity(team_id="T111", bot_user_id="W111", bot_id="B111", app_id="A111")
_REMOVING = ("app_uninstalled", "tokens_revoked")  # last: they disable the workspace
CORPUS = sorted(
    (
        path.stem
        for path in (corpora_root() / "slack" / "events").glob("*.json")
        if not path.stem.startswith("url_verification")
    ),
    key=lambda name: (name in _REMOVING, name),
)
WHEN = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass
class Both:
    """One bolt app, reachable over HTTP and over a Socket Mode connection."""

    sink: RecordingSink
    hub: SocketHub
    http_url: str
    socket: SlackSocketMode


@pytest.fixture
async def both() -> AsyncIterator[Both]:
    state = SlackState()
    sink = RecordingSink()
    with SocketHub(app_id="A111", ack_timeout_s=1.0) as hub:
        state.socket = hub
        with serve(create_slack_app(state)) as emulator:
            api_url = f"{emulator.url}/api/"
            client = WebSessions().client("xoxb-keel-emulated", api_url)
            workspace = SingleWorkspace(client, IDENTITY)
            bolt = build_bolt_app(workspace, sink, SystemClock(), api_url=api_url)
            app = FastAPI()
            events = SlackEvents(bolt, signing_secret=SECRET, clock=SystemClock())
            install_ingress(app, create_ingress_router(slack=events), body_limit_bytes=1 << 20)
            socket = SlackSocketMode(bolt, app_token=APP_TOKEN, api_url=api_url, ping_interval_s=1)
            with serve(app) as server:
                await socket.start()
                try:
                    # The client connects in the background: tests start from one connection.
                    assert await asyncio.to_thread(hub.wait, lambda: hub.connections >= 1)
                    yield Both(sink, hub, f"{server.url}/slack/events", socket)
                finally:
                    await socket.stop()


def _comparable(outcome: Signal | Ignored) -> Signal | Ignored:
    if isinstance(outcome, Signal):
        return dataclasses.replace(outcome, received_at=WHEN)
    return outcome


async def _acked(hub: SocketHub, envelope_id: str, timeout_s: float = 15) -> bool:
    return await asyncio.to_thread(hub.wait, lambda: hub.is_acked(envelope_id), timeout_s)


async def test_corpus_events_make_the_same_signals_over_socket_mode_as_over_http(
    both: Both,
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        for name in CORPUS:
            signed = sign_slack(load_slack_event(name), SECRET)
            response = await client.post(both.http_url, content=signed.body, headers=signed.headers)
            assert response.status_code == 200, name
            envelope_id = both.hub.send(load_slack_event(name))
            assert await _acked(both.hub, envelope_id), name

    over_http, over_socket = both.sink.accepted[0::2], both.sink.accepted[1::2]
    assert len(over_http) == len(over_socket) == len(CORPUS)
    for name, (http, _, http_id, http_kind), (ws, _, ws_id, ws_kind) in zip(
        CORPUS, over_http, over_socket, strict=True
    ):
        assert _comparable(http) == _comparable(ws), name
        assert (http_id, http_kind) == (ws_id, ws_kind), name
    assert any(isinstance(outcome, Signal) for outcome, *_ in over_socket)


async def test_envelope_is_not_acknowledged_until_the_sink_commits(both: Both) -> None:
    both.sink.failure = Retryable("database is away")
    envelope_id = both.hub.send(load_slack_event("app_mention"))
    await asyncio.to_thread(both.hub.wait, lambda: len(both.sink.failures) >= 1)
    assert not both.hub.is_acked(envelope_id)

    both.sink.failure = None  # the store is back: the redelivery is taken and acknowledged

    assert await _acked(both.hub, envelope_id)
    assert both.hub.attempts(envelope_id) >= 2
    assert [delivery for _, _, delivery, _ in both.sink.accepted] == ["Ev111"]


async def test_event_from_another_workspace_is_acknowledged_and_dropped_over_both_transports(
    both: Both,
) -> None:
    foreign = {**load_slack_event("app_mention"), "team_id": "T999"}
    signed = sign_slack(foreign, SECRET)
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(both.http_url, content=signed.body, headers=signed.headers)
    envelope_id = both.hub.send(foreign)

    assert response.status_code == 200 and await _acked(both.hub, envelope_id)
    outcomes = [outcome for outcome, *_ in both.sink.accepted]
    assert [type(o).__name__ for o in outcomes] == ["Ignored", "Ignored"]
    assert {(o.reason, o.detail) for o in outcomes if isinstance(o, Ignored)} == {
        (
            "unauthorised",
            "foreign workspace: event from Slack workspace 'T999'; Keel's bot token is for "
            "'T111'",
        )
    }


async def test_client_reconnects_and_keeps_receiving_when_slack_says_disconnect(
    both: Both,
) -> None:
    assert both.hub.connections == 1
    both.hub.disconnect("refresh_requested")
    await asyncio.to_thread(both.hub.wait, lambda: both.hub.connections >= 2)

    envelope_id = both.hub.send(load_slack_event("app_mention"))

    assert await _acked(both.hub, envelope_id)
    assert both.hub.connections == 2


async def test_mention_makes_one_task_when_its_ack_is_dropped_and_it_is_redelivered(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url, socket_mode=True) as live:
        assert live.hub is not None
        live.hub.drop_acks = 1  # the first ack is lost on the way back to Slack
        envelope_id = live.send_socket(live.mention("fix the flaky test"), event_id="EvDrop1")

        assert await _acked(live.hub, envelope_id)
        assert live.hub.attempts(envelope_id) == 2
        counts = await live.counts()
        assert (counts["signals"], counts["tasks"]) == (1, 1)
        db = Database.from_url(db_url)
        try:
            acks = db.read_sync(
                lambda s: list(s.scalars(select(OutboxRow).where(OutboxRow.purpose == "ack")))
            )
            [signal] = db.read_sync(lambda s: list(s.scalars(select(SignalRow))))
            [task] = db.read_sync(lambda s: list(s.scalars(select(TaskRow))))
        finally:
            db.close()
        assert len(acks) == 1 and signal.delivery_id == "EvDrop1"
        assert (signal.decision, signal.task_id) == ("new_task", task.task_id)
        assert not any(r.path.endswith("/slack/events") for r in live.slack.requests)


def _requests(live_slack: SlackState, method: str) -> list[Any]:
    return [r for r in live_slack.requests if r.path.endswith(method)]


async def test_keel_serve_opens_socket_mode_with_the_app_token_and_no_events_route(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url, socket_mode=True) as live:
        async with httpx.AsyncClient(timeout=10) as client:
            signed = sign_slack(live.envelope(live.mention("hello")), SECRET)
            response = await client.post(
                live.url + "/slack/events", content=signed.body, headers=signed.headers
            )
        assert response.status_code == 404  # events come over the websocket only
        assert len(_requests(live.slack, "apps.connections.open")) == 1


async def test_button_click_over_socket_mode_is_acknowledged_after_the_sink(both: Both) -> None:
    click = {
        "type": "block_actions",
        "team": {"id": "T111"},
        "user": {"id": "U222", "username": "dana"},
        "container": {"message_ts": "1.000200", "channel_id": "C111", "thread_ts": "1.000100"},
        "actions": [{"action_id": "keel:stop", "value": "t_1", "action_ts": "2.000300"}],
    }

    envelope_id = both.hub.send(click, "interactive")

    assert await _acked(both.hub, envelope_id)
    [(outcome, _, delivery, kind)] = both.sink.accepted
    assert isinstance(outcome, Signal) and (outcome.kind, outcome.command) == ("action", "stop")
    assert outcome.objective_key == "slack:T111/C111/1.000100"
    assert str(outcome.thread_ref) == "slack:T111/C111/1.000100"
    assert str(outcome.message) == "slack:T111/C111/1.000100:1.000200"  # the clicked post
    assert (delivery, kind) == ("action:T111:C111:2.000300:U222", "block_actions")
