"""Signed webhook requests as Slack and GitHub send them, and delivering them to Keel.

Slack signs ``v0:{timestamp}:{body}`` with HMAC-SHA256 under the app's signing secret
(``X-Slack-Signature: v0=<hex>``, ``X-Slack-Request-Timestamp``; retries add
``X-Slack-Retry-Num``/``X-Slack-Retry-Reason``). GitHub signs the body under the webhook
secret (``X-Hub-Signature-256: sha256=<hex>``) and names the event and delivery GUID in
``X-GitHub-Event``/``X-GitHub-Delivery``; a redelivery keeps the GUID.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.emulators.corpus import load_github_example, load_slack_event

if TYPE_CHECKING:  # `keel tasks` signs with this module and sends with httpx only when asked
    import httpx

__all__ = [
    "SignedRequest",
    "deliver",
    "deliver_github_event",
    "deliver_slack_event",
    "load_github_example",
    "load_slack_event",
    "sign_github",
    "sign_slack",
]


@dataclass(frozen=True, slots=True)
class SignedRequest:
    body: bytes
    headers: dict[str, str]

    def with_headers(self, **headers: str) -> SignedRequest:
        return dataclasses.replace(self, headers=self.headers | headers)


def encode(payload: dict[str, Any] | bytes) -> bytes:
    if isinstance(payload, bytes):
        return payload
    return json.dumps(payload, separators=(",", ":")).encode()


def slack_signature(signing_secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


def sign_slack(
    payload: dict[str, Any] | bytes,
    signing_secret: str,
    *,
    timestamp: int | None = None,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> SignedRequest:
    """An Events API request; pass an old ``timestamp`` to test the replay window."""
    body = encode(payload)
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": slack_signature(signing_secret, stamp, body),
    }
    if retry_num is not None:
        headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": retry_reason}
    return SignedRequest(body, headers)


def github_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_github(
    event: str,
    payload: dict[str, Any] | bytes,
    secret: str,
    *,
    delivery_id: str | None = None,
) -> SignedRequest:
    """A webhook delivery of ``event`` (the ``X-GitHub-Event`` value, e.g. ``issue_comment``)."""
    body = encode(payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/keel-emulator",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": github_signature(secret, body),
    }
    return SignedRequest(body, headers)


async def deliver(
    url: str,
    request: SignedRequest,
    *,
    times: int = 1,
    concurrently: bool = False,
    slack_retries: bool = False,
    timeout_s: float = 10.0,
) -> list[httpx.Response]:
    """POST ``request`` to ``url`` ``times`` times, in order or all at once.

    With ``slack_retries`` the repeats carry ``X-Slack-Retry-Num`` 1, 2, ... as Slack's
    own redeliveries do (the signature stays valid: headers are not signed).
    """
    attempts = [
        request.with_headers(
            **{"X-Slack-Retry-Num": str(n), "X-Slack-Retry-Reason": "http_timeout"}
        )
        if slack_retries and n > 0
        else request
        for n in range(times)
    ]
    import httpx

    async with httpx.AsyncClient(timeout=timeout_s) as client:

        async def post(attempt: SignedRequest) -> httpx.Response:
            return await client.post(url, content=attempt.body, headers=attempt.headers)

        if concurrently:
            return list(await asyncio.gather(*(post(a) for a in attempts)))
        return [await post(attempt) for attempt in attempts]


async def deliver_slack_event(
    url: str, payload: dict[str, Any], signing_secret: str, *, times: int = 1, **options: Any
) -> list[httpx.Response]:
    return await deliver(url, sign_slack(payload, signing_secret), times=times, **options)


async def deliver_github_event(
    url: str, event: str, payload: dict[str, Any], secret: str, *, times: int = 1, **options: Any
) -> list[httpx.Response]:
    return await deliver(url, sign_github(event, payload, secret), times=times, **options)
