"""``POST /github/webhook``: verify the delivery, translate it, hand it to the sink, then ack.

The signature (X-Hub-Signature-256) is checked in constant time on the raw body before the
body is parsed; X-GitHub-Delivery is the delivery id (a redelivery keeps it). ``ping`` is
answered without routing. Ignored outcomes go to the sink too, which records the drop, with
its reason (an unknown event, a repository outside ``github.repositories``).

No GitHub call happens on the request path: a person's request whose permission must be
looked up goes to routing's held stage (``routing/held.py``), which holds it in the database,
and is answered at once; the lookup and the routing happen afterwards. One whose asker a
recent lookup already let through is routed at once, like any other delivery. The delivery's
``installation.id`` is remembered for its repository, so that repository's calls and git
pushes use that installation's token.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from adapters.checkouts import allowed
from adapters.config import GitHubConfig
from adapters.github.signals import GitHubIdentity, signal_from_github
from adapters.github.verify import verify_github_signature
from routing.permissions import needs_permission
from routing.signal import Ignored, Signal
from runtime.clock import Clock, SystemClock
from runtime.config import AutoReview
from runtime.errors import ConfigError, Retryable

if TYPE_CHECKING:
    from adapters.github.installations import Installations
    from routing.held import HeldDeliveries
    from routing.sink import SignalSink

# Signals from people, whose permission decides whether Keel acts (CI results go to daemons).
_PERSON_KINDS = frozenset({"issue_comment", "review_comment", "issue_opened", "pr_opened"})


class GitHubWebhook:
    """The webhook endpoint; ``handle`` is the FastAPI route. It is also how routing's held
    stage reads a held delivery back (``routing.held.Reader``)."""

    provider = "github"

    def __init__(
        self,
        *,
        secret: str,
        identity: GitHubIdentity,
        sink: SignalSink,
        trigger: str = "@keel",
        trigger_label: str | None = None,
        repositories: tuple[str, ...] = (),
        clock: Clock | None = None,
        installations: Installations | None = None,
        auto_review: tuple[AutoReview, ...] = (),
    ) -> None:
        self.secret = secret.encode()
        self.identity = identity
        self.sink = sink
        self.trigger = trigger
        self.trigger_label = trigger_label
        self.repositories = repositories
        self.auto_review = auto_review
        self.clock = clock or SystemClock()
        # Set by the composition root: the held stage reads its deliveries back through this.
        self.held: HeldDeliveries | None = None
        self.installations = installations

    @classmethod
    def from_config(
        cls,
        config: GitHubConfig,
        sink: SignalSink,
        clock: Clock,
        *,
        installations: Installations | None = None,
        auto_review: tuple[AutoReview, ...] = (),
    ) -> GitHubWebhook:
        if config.webhook_secret is None:
            raise ConfigError("github.webhook_secret: required to receive GitHub webhooks")
        identity = GitHubIdentity(bot_login=config.bot_login, app_id=config.app.app_id)
        secret = config.webhook_secret.get_secret_value()
        return cls(
            secret=secret,
            identity=identity,
            sink=sink,
            trigger=config.trigger,
            trigger_label=config.trigger_label,
            repositories=config.repositories,
            clock=clock,
            installations=installations,
            auto_review=auto_review,
        )

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
        outcome = self.translate(event, delivery_id, payload, self.clock.now())
        if isinstance(outcome, Signal):
            self._remember_installation(outcome, payload)
        try:
            if self.held is not None and _held(outcome):
                await self.held.take(outcome, event, delivery_id, payload)
            else:
                await self.sink.accept(
                    outcome,
                    provider=self.provider,
                    delivery_id=delivery_id,
                    raw_kind=self.raw_kind(event, payload),
                )
        except Retryable:
            return JSONResponse(
                {"error": "temporarily unavailable"}, status_code=503, headers={"Retry-After": "5"}
            )
        return JSONResponse({"ok": True})

    @staticmethod
    def raw_kind(event: str, payload: dict[str, Any]) -> str:
        """The kind a delivery is recorded with: the event and its action."""
        action = payload.get("action")
        return f"{event}.{action}" if isinstance(action, str) else event

    def translate(
        self, event: str, delivery_id: str, payload: dict[str, Any], received_at: datetime
    ) -> Signal | Ignored:
        """The delivery as routing sees it; a repository outside the allow-list is dropped."""
        outcome = signal_from_github(
            event,
            delivery_id,
            payload,
            self.identity,
            received_at=received_at,
            trigger=self.trigger,
            trigger_label=self.trigger_label,
            auto_review=self.auto_review,
        )
        if isinstance(outcome, Signal) and outcome.repo and not allowed(
            outcome.repo, self.repositories
        ):
            return Ignored("unauthorised", f"{outcome.repo} is not in github.repositories")
        return outcome

    def _remember_installation(self, signal: Signal, payload: dict[str, Any]) -> None:
        installation = payload.get("installation")
        found = installation.get("id") if isinstance(installation, dict) else None
        if self.installations is not None and signal.repo and isinstance(found, int):
            self.installations.remember(signal.repo, found)


def _held(outcome: Signal | Ignored) -> TypeGuard[Signal]:
    return (
        isinstance(outcome, Signal) and outcome.kind in _PERSON_KINDS and needs_permission(outcome)
    )


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # nesting deeper than the parser's
        return None
    return parsed if isinstance(parsed, dict) else None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
