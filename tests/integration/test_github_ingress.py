"""POST /github/webhook over a real socket: signature, delivery id, ping, the sink.

The sink is a recording fake at a port Keel owns (``SignalSink``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from adapters.config import GitHubAppConfig, GitHubConfig
from adapters.emulators.server import serve
from adapters.emulators.webhooks import deliver, load_github_example, sign_github
from adapters.github.webhook import GitHubWebhook
from adapters.web.ingress import create_ingress_router, install_ingress
from routing.signal import Ignored, Signal
from runtime.clock import SystemClock
from runtime.errors import Retryable
from runtime.threads import GitHubIssue
from tests.sinks import Ingress, RecordingSink

SECRET = "github-webhook-secret"
BODY_LIMIT = 64 * 1024


@pytest.fixture
def ingress() -> Iterator[Ingress]:
    sink = RecordingSink()
    config = GitHubConfig(
        webhook_secret=SECRET, bot_login="keel[bot]", app=GitHubAppConfig(app_id=4242)
    )
    webhook = GitHubWebhook.from_config(config, sink, SystemClock())
    app = FastAPI()
    install_ingress(app, create_ingress_router(github=webhook), body_limit_bytes=BODY_LIMIT)
    with serve(app) as server:
        yield Ingress(f"{server.url}/github/webhook", sink)


def _comment(body: str = "@keel please fix the flaky test") -> dict[str, object]:
    return load_github_example("issue_comment/created", **{"comment.body": body})


async def test_comment_reaches_sink_when_signature_is_good(ingress: Ingress) -> None:
    delivery = str(uuid.uuid4())
    signed = sign_github("issue_comment", _comment(), SECRET, delivery_id=delivery)

    response = await ingress.post(signed.body, signed.headers)

    assert (response.status_code, response.json()) == (200, {"ok": True})
    [(outcome, provider, delivery_id, raw_kind)] = ingress.sink.accepted
    assert isinstance(outcome, Signal)
    assert (outcome.kind, outcome.thread_ref) == (
        "issue_comment",
        GitHubIssue("Codertocat/Hello-World", 1),
    )
    assert outcome.actor.permission is None  # enrichment is not done on the request path
    assert (provider, delivery_id, raw_kind) == ("github", delivery, "issue_comment.created")


@pytest.mark.parametrize(
    "signature",
    ["sha256=" + "0" * 64, "", "sha1=abc", "sha256=zz"],
    ids=["wrong", "empty", "other-scheme", "not-hex"],
)
async def test_refused_401_when_signature_is_bad(ingress: Ingress, signature: str) -> None:
    signed = sign_github("issue_comment", _comment(), SECRET)

    response = await ingress.post(signed.body, signed.headers | {"X-Hub-Signature-256": signature})

    assert response.status_code == 401
    assert ingress.sink.accepted == []


async def test_refused_401_when_signature_is_missing(ingress: Ingress) -> None:
    signed = sign_github("issue_comment", _comment(), SECRET)
    headers = {k: v for k, v in signed.headers.items() if k != "X-Hub-Signature-256"}

    response = await ingress.post(signed.body, headers)

    assert response.status_code == 401
    assert ingress.sink.accepted == []


async def test_refused_401_when_signed_with_another_secret(ingress: Ingress) -> None:
    signed = sign_github("issue_comment", _comment(), "not-our-secret")

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 401
    assert ingress.sink.accepted == []


@pytest.mark.parametrize("body", [b"{not json", b"[]", b"\xff\xfe"])
async def test_refused_400_when_signed_body_is_not_a_json_object(
    ingress: Ingress, body: bytes
) -> None:
    signed = sign_github("issue_comment", body, SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 400
    assert ingress.sink.accepted == []


async def test_refused_400_when_delivery_id_is_missing(ingress: Ingress) -> None:
    signed = sign_github("issue_comment", _comment(), SECRET)
    headers = {k: v for k, v in signed.headers.items() if k != "X-GitHub-Delivery"}

    response = await ingress.post(signed.body, headers)

    assert response.status_code == 400
    assert ingress.sink.accepted == []


async def test_refused_413_when_body_is_over_the_limit(ingress: Ingress) -> None:
    signed = sign_github("issue_comment", _comment("x" * BODY_LIMIT), SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 413
    assert ingress.sink.accepted == []


async def test_ping_answered_ok_when_hook_is_created(ingress: Ingress) -> None:
    signed = sign_github("ping", load_github_example("ping/ping"), SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert (response.status_code, response.json()) == (200, {"ok": True})
    assert ingress.sink.accepted == []


async def test_all_acknowledged_when_same_delivery_arrives_five_times_at_once(
    ingress: Ingress,
) -> None:
    delivery = str(uuid.uuid4())
    signed = sign_github("issue_comment", _comment(), SECRET, delivery_id=delivery)

    responses = await deliver(ingress.url, signed, times=5, concurrently=True)

    assert [r.status_code for r in responses] == [200] * 5
    # Deduplication is the sink's (the Signal store's unique key); ingress hands each on.
    assert [d for _, _, d, _ in ingress.sink.accepted] == [delivery] * 5


async def test_unsupported_event_reaches_sink_as_ignored_when_not_routable(
    ingress: Ingress,
) -> None:
    signed = sign_github("issues", load_github_example("issues/pinned"), SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 200
    [(outcome, _, _, raw_kind)] = ingress.sink.accepted
    assert isinstance(outcome, Ignored) and outcome.reason == "unsupported"
    assert outcome.detail == "issues.pinned"  # the recorded reason names what was dropped
    assert raw_kind == "issues.pinned"


async def test_answered_503_when_sink_is_unavailable(ingress: Ingress) -> None:
    ingress.sink.failure = Retryable("database is down")
    signed = sign_github("issue_comment", _comment(), SECRET)

    response = await ingress.post(signed.body, signed.headers)

    assert response.status_code == 503
