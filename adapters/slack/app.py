"""Slack over HTTP: ``POST /slack/events`` and ``POST /slack/interactivity``, and the install
flow (``GET /slack/install``, ``GET /slack/oauth_redirect``) when OAuth is configured.

The v0 signature and its five-minute window are checked here, once, on the raw body, with
Keel's clock (bolt's own check is switched off: it answers 500 to a non-numeric timestamp and
cannot tell an unsigned malformed body, 401, from a signed one, 400). Then the shared bolt
app (``bolt.py``) answers ``url_verification``, authorizes and ingests. Retries
(``X-Slack-Retry-Num``) go to the sink like first deliveries: it recognises the event id.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from adapters.slack.verify import verify_slack_signature
from runtime.clock import Clock

SLACK_EVENTS_PATH = "/slack/events"
SLACK_INTERACTIVITY_PATH = "/slack/interactivity"
SLACK_INSTALL_PATH = "/slack/install"
SLACK_REDIRECT_PATH = "/slack/oauth_redirect"


class SlackEvents:
    """The signed Slack routes; ``handle`` serves events and interactivity alike."""

    def __init__(self, bolt: AsyncApp, *, signing_secret: str, clock: Clock) -> None:
        self.signing_secret = signing_secret
        self.clock = clock
        self._handler = AsyncSlackRequestHandler(bolt)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        if not self._signed(request, body):
            return JSONResponse({"error": "invalid request"}, status_code=401)
        if _payload_of(request, body) is None:
            return JSONResponse({"error": "malformed body"}, status_code=400)
        response: Response = await self._handler.handle(request)
        return response

    async def install(self, request: Request) -> Response:
        """The OAuth flow's pages; bolt checks the state parameter and its cookie."""
        response: Response = await self._handler.handle(request)
        return response

    def _signed(self, request: Request, body: bytes) -> bool:
        return verify_slack_signature(
            self.signing_secret,
            body,
            timestamp=request.headers.get("x-slack-request-timestamp"),
            signature=request.headers.get("x-slack-signature"),
            now=self.clock.now(),
        )


def _payload_of(request: Request, body: bytes) -> dict[str, Any] | None:
    """The JSON object an events body is, or an interactivity form carries as ``payload``."""
    try:
        text = body.decode("utf-8")
        if "x-www-form-urlencoded" in request.headers.get("content-type", ""):
            text = parse_qs(text).get("payload", [""])[0]
        payload = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):  # nesting deeper than the parser's
        return None
    return payload if isinstance(payload, dict) else None
