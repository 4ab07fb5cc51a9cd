"""Hostile input against the real app's webhook routes, and chat text aimed at a shell.

Hypothesis sends arbitrary bodies and headers to both routes: never a 5xx and nothing
stored without a valid signature. Replays outside Slack's window are refused, oversized
bodies get 413, deeply nested JSON 400. Schemathesis fuzzes what the OpenAPI document
describes. Shell metacharacters in a mention reach the model as text and nothing runs them.
"""

from __future__ import annotations

import asyncio
import json
import string
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.emulators.webhooks import load_github_example, sign_github, sign_slack
from runtime.store import tool_calls, transcripts
from runtime.store.engine import Database
from tests.integration.keel_live import (
    SIGNING_SECRET,
    WEBHOOK_SECRET,
    Live,
    drive,
    live_keel,
)

BODY_LIMIT = 64 * 1024
ROUTES = ("/slack/events", "/github/webhook")
HEADER_NAMES = (
    "X-Slack-Signature",
    "X-Slack-Request-Timestamp",
    "X-Slack-Retry-Num",
    "X-GitHub-Event",
    "X-GitHub-Delivery",
    "X-Hub-Signature-256",
    "Content-Type",
    "Content-Length-Junk",
)
FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# What a client can put on the wire: printable, no surrounding whitespace.
header_values = st.text(alphabet=string.printable.strip("\r\n\x0b\x0c"), max_size=80).map(str.strip)
headers = st.dictionaries(st.sampled_from(HEADER_NAMES), header_values, max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=30,
)
bodies = st.binary(max_size=2048) | json_values.map(lambda v: json.dumps(v).encode())


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[Live]:
    with live_keel(tmp_path, db_url, extra={"server": {"body_limit_bytes": BODY_LIMIT}}) as live:
        yield live


def _post(live: Live, route: str, body: bytes, head: dict[str, str]) -> httpx.Response:
    with httpx.Client(timeout=10) as client:
        return client.post(live.url + route, content=body, headers=head)


def _signals(live: Live) -> int:
    import asyncio

    return asyncio.run(live.counts())["signals"]


def test_no_5xx_and_nothing_stored_when_body_and_headers_are_arbitrary(live: Live) -> None:
    statuses: set[int] = set()

    @FUZZ
    @given(route=st.sampled_from(ROUTES), body=bodies, head=headers)
    def send(route: str, body: bytes, head: dict[str, str]) -> None:
        response = _post(live, route, body, head)
        statuses.add(response.status_code)
        assert response.status_code < 500, (route, body[:200], head, response.text)

    send()
    assert _signals(live) == 0
    assert statuses <= {400, 401, 403, 413, 415, 422}, statuses


def test_no_5xx_when_signed_json_is_arbitrary(live: Live) -> None:
    @FUZZ
    @given(
        payload=json_values,
        event=st.sampled_from(["issue_comment", "issues", "push"]),
        slack=st.booleans(),
    )
    def send(payload: Any, event: str, slack: bool) -> None:
        body = json.dumps(payload).encode()
        if slack:
            signed = sign_slack(body, SIGNING_SECRET)
            response = _post(live, ROUTES[0], signed.body, signed.headers)
        else:
            signed = sign_github(event, body, WEBHOOK_SECRET)
            response = _post(live, ROUTES[1], signed.body, signed.headers)
        assert response.status_code < 500, (payload, response.text)

    send()


def test_refused_401_when_slack_request_is_replayed_outside_the_window(live: Live) -> None:
    event = live.mention("please fix the flaky test")
    for age in (5 * 60 + 5, 3600, 86400):
        signed = sign_slack(live.envelope(event), SIGNING_SECRET, timestamp=int(time.time()) - age)
        assert _post(live, ROUTES[0], signed.body, signed.headers).status_code == 401
    future = sign_slack(live.envelope(event), SIGNING_SECRET, timestamp=int(time.time()) + 3600)
    assert _post(live, ROUTES[0], future.body, future.headers).status_code == 401
    assert _signals(live) == 0


@pytest.mark.parametrize("route", ROUTES)
def test_refused_413_when_body_is_oversized(live: Live, route: str) -> None:
    payload = {"type": "event_callback", "padding": "x" * (BODY_LIMIT + 1)}
    signed = (
        sign_slack(payload, SIGNING_SECRET)
        if route == ROUTES[0]
        else sign_github("issue_comment", payload, WEBHOOK_SECRET)
    )
    assert _post(live, route, signed.body, signed.headers).status_code == 413
    assert _signals(live) == 0


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("shape", ["objects", "arrays"])
def test_refused_400_when_signed_json_is_deeply_nested(live: Live, route: str, shape: str) -> None:
    depth = 10_000
    body = (
        ('{"a":' * depth + "1" + "}" * depth) if shape == "objects" else ("[" * depth + "]" * depth)
    )
    signed = (
        sign_slack(body.encode(), SIGNING_SECRET)
        if route == ROUTES[0]
        else sign_github("issue_comment", body.encode(), WEBHOOK_SECRET)
    )
    assert _post(live, route, signed.body, signed.headers).status_code == 400
    assert _signals(live) == 0


def test_no_5xx_when_schemathesis_fuzzes_the_openapi_document(live: Live) -> None:
    schemathesis = pytest.importorskip("schemathesis")  # a test-only extra; say so if absent
    schema = schemathesis.openapi.from_url(live.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations  # what is served: the webhook routes and the health checks

    for operation in operations:

        @FUZZ
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            response = case.call(base_url=live.url)
            assert response.status_code < 500, (case.path, response.text)

        call()
    # The loopback API is open without a token, so a well-formed POST /api/tasks makes a task
    # (that is its job); no webhook route stores anything unsigned.
    assert asyncio.run(live.counts())["webhook_signals"] == 0


async def test_shell_metacharacters_never_run_when_a_mention_carries_them(
    db_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    hostile = (
        f"please fix $(touch {marker}) `touch {marker}` ; touch {marker} && "
        f"touch {marker} | sh -c 'touch {marker}' > {marker}"
    )
    with live_keel(tmp_path / "keel", db_url, workers=True) as live:
        task_id, _ = await drive(live, text=hostile)
    db = Database.from_url(db_url)
    entries = await db.read(lambda s: transcripts.transcript(s, task_id))
    calls = await db.read(lambda s: tool_calls.all_calls(s, task_id))
    db.close()
    assert any(hostile in json.dumps(e.payload, ensure_ascii=False) for e in entries)
    commands = [c.args.get("command", "") for c in calls if c.name == "run_command"]
    assert commands and all(str(marker) not in c for c in commands)
    assert not marker.exists()


async def test_accepted_and_stored_once_when_signed_text_carries_nul(live: Live) -> None:
    slack = await live.send_slack(live.mention("please fix \u0000 this"), times=2)
    comment = load_github_example(
        "issue_comment/created", **{"comment.body": "@keel fix \u0000 it", "comment.id": 55}
    )
    github = await live.send_github("issue_comment", comment)

    assert [r.status_code for r in slack + github] == [200, 200, 200]
    # The GitHub request is routed once its author's permission is known, after the answer.
    deadline = time.monotonic() + 20
    while (await live.counts())["signals"] < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert (await live.counts())["tasks"] == 2


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/tasks?before=a%00b"),
        ("GET", "/api/tasks/t%00x"),
        ("POST", "/api/tasks/t%00x/cancel"),
        ("GET", "/ui/tasks/t%00x"),
    ],
)
def test_no_5xx_when_an_id_in_the_url_carries_nul(live: Live, method: str, path: str) -> None:
    with httpx.Client(timeout=10) as client:
        response = client.request(method, live.url + path)
    assert response.status_code in (200, 404)
