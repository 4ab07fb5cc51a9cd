"""``POST /slack/events``: slack-bolt verifies the request, Keel translates and records it.

slack-bolt's AsyncApp checks the v0 signature on the raw body with its five-minute window
(401 otherwise) and answers ``url_verification``. Its authorization step is given the bot's
identity from startup, so no Web API call (auth.test) happens on the request path, and its
self-event filter is off: our own events reach the sink, which records them as dropped.
One global middleware turns each event into a Signal (or Ignored) with
``signal_from_slack_event`` and answers only after the sink returned. Retries
(``X-Slack-Retry-Num``) go to the sink like first deliveries: it recognises the event id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from adapters.config import SlackConfig
from adapters.slack.signals import SlackIdentity, signal_from_slack_event
from adapters.slack.verify import verify_slack_signature
from runtime.clock import Clock, SystemClock
from runtime.errors import ConfigError, Retryable

if TYPE_CHECKING:
    from adapters.web.ingress import SignalSink

# Slack waits three seconds for an answer; a sink that needs longer is asked to retry.
_RETRY_LATER = {"error": "temporarily unavailable"}


class SlackEvents:
    """The Events API endpoint; ``handle`` is the FastAPI route."""

    def __init__(
        self,
        *,
        signing_secret: str,
        identity: SlackIdentity,
        sink: SignalSink,
        clock: Clock | None = None,
        api_url: str = "https://slack.com/api/",
    ) -> None:
        self.signing_secret = signing_secret
        self.clock = clock or SystemClock()
        self.bolt = _bolt_app(signing_secret, identity, api_url)
        self.bolt.use(_Ingest(identity, sink, self.clock))
        self._handler = AsyncSlackRequestHandler(self.bolt)

    @classmethod
    def from_config(
        cls, config: SlackConfig, identity: SlackIdentity, sink: SignalSink, clock: Clock
    ) -> SlackEvents:
        if config.signing_secret is None:
            raise ConfigError("slack.signing_secret: required to receive Slack events")
        secret = config.signing_secret.get_secret_value()
        return cls(
            signing_secret=secret, identity=identity, sink=sink, clock=clock, api_url=config.api_url
        )

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        # Checked before bolt as well: bolt answers 500 to a non-numeric timestamp, and it
        # cannot build its request from a body that is not JSON, which must still be 401
        # when unsigned and 400 only when signed.
        if not self._signed(request, body):
            return JSONResponse({"error": "invalid request"}, status_code=401)
        if not _is_json_object(body):
            return JSONResponse({"error": "malformed JSON body"}, status_code=400)
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


def _bolt_app(signing_secret: str, identity: SlackIdentity, api_url: str) -> AsyncApp:
    async def authorize(**_: Any) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=None,
            team_id=identity.team_id,
            bot_user_id=identity.bot_user_id,
            bot_id=identity.bot_id,
        )

    return AsyncApp(
        signing_secret=signing_secret,
        authorize=authorize,
        # A client is still built per request; it is never called, but points at our API.
        client=AsyncWebClient(base_url=api_url, retry_handlers=[]),
        ignoring_self_events_enabled=False,
        ssl_check_enabled=False,
    )


def _is_json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError, RecursionError):  # nesting deeper than the parser's
        return False


class _Ingest(AsyncMiddleware):
    """Runs after bolt's verification: translate the envelope and hand it to the sink."""

    def __init__(self, identity: SlackIdentity, sink: SignalSink, clock: Clock) -> None:
        self.identity = identity
        self.sink = sink
        self.clock = clock

    async def async_process(
        self,
        *,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse]],  # bolt passes it by this name
    ) -> BoltResponse:
        envelope: dict[str, Any] = req.body
        if envelope.get("type") == "app_rate_limited":
            return BoltResponse(status=200, body="")  # a notice to us, not an event to route
        outcome = signal_from_slack_event(envelope, self.identity, received_at=self.clock.now())
        try:
            await self.sink.accept(
                outcome,
                provider="slack",
                delivery_id=_delivery_id(envelope, req.raw_body),
                raw_kind=_raw_kind(envelope),
            )
        except Retryable:
            headers: dict[str, str | Sequence[str]] = {
                "Content-Type": "application/json",
                "Retry-After": "5",
            }
            return BoltResponse(status=503, body=json.dumps(_RETRY_LATER), headers=headers)
        return BoltResponse(status=200, body="")


def _delivery_id(envelope: dict[str, Any], raw_body: str) -> str:
    event_id = envelope.get("event_id")
    if isinstance(event_id, str) and event_id:
        return event_id
    # No event id to dedupe on: the body itself is the identity of a redelivery.
    return "body:" + hashlib.sha256(raw_body.encode()).hexdigest()[:32]


def _raw_kind(envelope: dict[str, Any]) -> str:
    event = envelope.get("event")
    if isinstance(event, dict) and isinstance(event.get("type"), str):
        return str(event["type"])
    return str(envelope.get("type") or "unknown")
