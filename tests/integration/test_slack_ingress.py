"""POST /slack/events over a real socket: slack-bolt verification, translation, the sink.

The sink is a recording fake at a port Keel owns (``SignalSink``). The Slack emulator stands
in for the Web API so the tests can show that no API call is made on the request path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from fastapi import FastAPI

from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.emulators.webhooks import deliver, load_slack_event, sign_slack
from adapters.slack.app import SlackEvents
from adapters.slack.bolt import build_bolt_app
from adapters.slack.signals import SlackIdentity
from adapters.slack.workspaces import SingleWorkspace, WebSessions
from adapters.web.ingress import create_ingress_router, install_ingress
from routing.signal import Ignored, Signal
from runtime.clock import SystemClock
from runtime.errors import Retryable
from runtime.threads import SlackThread
from tests.sinks import Ingress, RecordingSink

SECRET = "slack-signing-secret"
IDENTITY = SlackIdentity(team_id="T111", bot_user_id="W111", bot_id="B111", app_id="A111")
BODY_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class SlackIngress(Ingress):
    slack_api: SlackState


@pytest.fixture
def ingress() -> Iterator[SlackIngress]:
    api = SlackState()
    sink = RecordingSink()
    with serve(create_slack_app(api)) as emulator:
        api_url = f"{emulator.url}/api/"
        workspace = SingleWorkspace(WebSessions().client("xoxb-keel-emulated", api_url), IDENTITY)
        bolt = build_bolt_app(workspace, sink, SystemClock(), api_url=api_url)
        events = SlackEvents(bolt, signing_secret=SECRET, clock=SystemClock())
        app = FastAPI()
        install_ingress(app, create_ingress_router(slack=events), body_limit_bytes=BODY_LIMIT)
        with serve(app) as server:
            yield SlackIngress(f"{server.url}/slack/events", sink, api)


async def test_mention_reaches_sink_when_signature_is_good(ingress: SlackIngress) -> None:
    signed = sign_slack(load_slack_event("app_mention"), SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 200
    [(outcome, provider, delivery_id, raw_kind)] = ingress.sink.accepted
    assert isinstance(outcome, Signal)
    assert (outcome.kind, outcome.thread_ref) == (
        "mention",
        SlackThread("T111", "C111", "1595926230.009600"),
    )
    assert (provider, delivery_id, raw_kind) == ("slack", "Ev111", "app_mention")
    assert ingress.slack_api.requests == []  # no auth.test or any other call on the way in


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Slack-Signature": "v0=" + "0" * 64},
        {"X-Slack-Signature": ""},
        {"X-Slack-Request-Timestamp": ""},
    ],
    ids=["wrong", "empty-signature", "empty-timestamp"],
)
async def test_refused_401_when_signature_is_bad_or_missing(
    ingress: SlackIngress, headers: dict[str, str]
) -> None:
    signed = sign_slack(load_slack_event("app_mention"), SECRET).with_headers(**headers)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 401
    assert ingress.sink.accepted == []


async def test_refused_401_when_signature_headers_are_absent(ingress: SlackIngress) -> None:
    body = json.dumps(load_slack_event("app_mention")).encode()

    response = await ingress.post(body, {"Content-Type": "application/json"})

    assert response.status_code == 401
    assert ingress.sink.accepted == []


async def test_refused_401_when_timestamp_is_older_than_five_minutes(ingress: SlackIngress) -> None:
    stale = int(time.time()) - 5 * 60 - 5
    signed = sign_slack(load_slack_event("app_mention"), SECRET, timestamp=stale)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 401
    assert ingress.sink.accepted == []


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"text"'])
async def test_refused_400_when_signed_body_is_not_a_json_object(
    ingress: SlackIngress, body: bytes
) -> None:
    signed = sign_slack(body, SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 400
    assert ingress.sink.accepted == []


async def test_refused_401_when_malformed_body_is_unsigned(ingress: SlackIngress) -> None:
    signed = sign_slack(b"{not json", "another-secret")

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 401


async def test_refused_413_when_body_is_over_the_limit(ingress: SlackIngress) -> None:
    payload = load_slack_event("app_mention", **{"event.text": "x" * BODY_LIMIT})
    signed = sign_slack(payload, SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 413
    assert ingress.sink.accepted == []


async def test_refused_413_when_chunked_body_runs_over_the_limit(ingress: SlackIngress) -> None:
    signed = sign_slack(load_slack_event("app_mention", **{"event.text": "y" * BODY_LIMIT}), SECRET)

    async def chunks() -> Any:
        for start in range(0, len(signed.body), 1024):
            yield signed.body[start : start + 1024]

    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(ingress.url, content=chunks(), headers=signed.headers)

    assert response.status_code == 413
    assert ingress.sink.accepted == []


async def test_challenge_answered_when_url_verification(ingress: SlackIngress) -> None:
    payload = load_slack_event("url_verification")
    signed = sign_slack(payload, SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 200
    assert payload["challenge"] in response.text
    assert ingress.sink.accepted == []


async def test_retry_acknowledged_and_passed_on_when_retry_num_is_set(
    ingress: SlackIngress,
) -> None:
    signed = sign_slack(load_slack_event("app_mention"), SECRET, retry_num=1)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 200
    assert [delivery for _, _, delivery, _ in ingress.sink.accepted] == ["Ev111"]


async def test_all_acknowledged_when_same_delivery_arrives_five_times_at_once(
    ingress: SlackIngress,
) -> None:
    signed = sign_slack(load_slack_event("app_mention"), SECRET)

    responses = await deliver(ingress.url, signed, times=5, concurrently=True, slack_retries=True)

    assert [r.status_code for r in responses] == [200] * 5
    # Deduplication is the sink's (the Signal store's unique key); ingress hands each on.
    assert [delivery for _, _, delivery, _ in ingress.sink.accepted] == ["Ev111"] * 5


async def test_own_message_reaches_sink_as_self_when_bot_posted(ingress: SlackIngress) -> None:
    payload = load_slack_event(
        "message.in-thread.channel", **{"event.bot_id": IDENTITY.bot_id, "event.user": "W111"}
    )
    signed = sign_slack(payload, SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 200
    [(outcome, *_)] = ingress.sink.accepted
    assert isinstance(outcome, Signal) and outcome.actor.is_self


async def test_unsupported_event_reaches_sink_as_ignored_when_not_routable(
    ingress: SlackIngress,
) -> None:
    signed = sign_slack(load_slack_event("member_joined_channel"), SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 200
    [(outcome, _, _, raw_kind)] = ingress.sink.accepted
    assert isinstance(outcome, Ignored) and outcome.reason == "unsupported"
    assert raw_kind == "member_joined_channel"


async def test_answered_503_when_sink_is_unavailable(ingress: SlackIngress) -> None:
    ingress.sink.failure = Retryable("database is down")
    signed = sign_slack(load_slack_event("app_mention"), SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 503


def _click_form(payload: object) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


async def test_interactivity_is_signed_like_events(ingress: SlackIngress) -> None:
    url = ingress.url.replace("/slack/events", "/slack/interactivity")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    unsigned = sign_slack(_click_form({"type": "block_actions"}), "another-secret")
    malformed = sign_slack(b"payload=%7Bnot-json", SECRET)

    async with httpx.AsyncClient(timeout=10) as client:
        refused = await client.post(url, content=unsigned.body, headers=unsigned.headers | form)
        bad = await client.post(url, content=malformed.body, headers=malformed.headers | form)

    assert (refused.status_code, bad.status_code) == (401, 400)
    assert ingress.sink.accepted == []
