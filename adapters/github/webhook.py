"""``POST /github/webhook``: verify the delivery, translate it, hand it to the sink, then ack.

The signature (X-Hub-Signature-256) is checked in constant time on the raw body before the
body is parsed; X-GitHub-Delivery is the delivery id (a redelivery keeps it). ``ping`` is
answered without routing. Ignored outcomes go to the sink too, which records the drop. The
actor's permission is not looked up here: no GitHub call happens on the request path.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from adapters.config import GitHubConfig
from adapters.github.signals import GitHubIdentity, signal_from_github
from adapters.github.verify import verify_github_signature
from runtime.clock import Clock, SystemClock
from runtime.errors import ConfigError, Retryable

if TYPE_CHECKING:
    from adapters.web.ingress import SignalSink


class GitHubWebhook:
    """The webhook endpoint; ``handle`` is the FastAPI route."""

    def __init__(
        self,
        *,
        secret: str,
        identity: GitHubIdentity,
        sink: SignalSink,
        trigger: str = "@keel",
        clock: Clock | None = None,
    ) -> None:
        self.secret = secret.encode()
        self.identity = identity
        self.sink = sink
        self.trigger = trigger
        self.clock = clock or SystemClock()

    @classmethod
    def from_config(cls, config: GitHubConfig, sink: SignalSink, clock: Clock) -> GitHubWebhook:
        if config.webhook_secret is None:
            raise ConfigError("github.webhook_secret: required to receive GitHub webhooks")
        identity = GitHubIdentity(bot_login=config.bot_login, app_id=config.app.app_id)
        secret = config.webhook_secret.get_secret_value()
        return cls(secret=secret, identity=identity, sink=sink, trigger=config.trigger, clock=clock)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        if not verify_github_signature(
            self.secret, body, request.headers.get("x-hub-signature-256")
        ):
            return _error(401, "invalid signature")
        event = request.headers.get("x-github-event", "")
        delivery_id = request.headers.get("x-github-delivery", "")
        if not event or not delivery_id:
            return _error(400, "X-GitHub-Event and X-GitHub-Delivery are required")
        payload = _json_object(body)
        if payload is None:
            return _error(400, "malformed JSON body")
        if event == "ping":
            return JSONResponse({"ok": True})
        return await self._accept(event, delivery_id, payload)

    async def _accept(self, event: str, delivery_id: str, payload: dict[str, Any]) -> Response:
        outcome = signal_from_github(
            event,
            delivery_id,
            payload,
            self.identity,
            received_at=self.clock.now(),
            trigger=self.trigger,
        )
        action = payload.get("action")
        raw_kind = f"{event}.{action}" if isinstance(action, str) else event
        try:
            await self.sink.accept(
                outcome, provider="github", delivery_id=delivery_id, raw_kind=raw_kind
            )
        except Retryable:
            return JSONResponse(
                {"error": "temporarily unavailable"}, status_code=503, headers={"Retry-After": "5"}
            )
        return JSONResponse({"ok": True})


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # nesting deeper than the parser's
        return None
    return parsed if isinstance(parsed, dict) else None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
