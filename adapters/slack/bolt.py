"""The slack-bolt app both Slack transports share: HTTP (``app.py``) and Socket Mode.

Bolt authorizes each request from Keel's own records (``Workspaces``: the bot's identity
from startup, or the team's installation), with no Web API call on the way in. One global
middleware turns every event into a Signal (or Ignored) and answers only after the sink
committed it: over HTTP the answer is the 200, over Socket Mode it is the envelope's ack, so
an event whose commit did not happen is delivered again. Our own events are not filtered
by bolt: the sink records them as dropped, as it does (``unauthorised``) an event from a
workspace other than the one Keel's bot was authorised in. ``app_uninstalled`` and
``tokens_revoked`` also disable the team before they are recorded. Button clicks go to
bolt's action listeners (``actions.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.actions import register_actions
from adapters.slack.signals import SlackIdentity, foreign_workspace, signal_from_slack_event
from routing.signal import Ignored, Signal
from routing.sink import SignalSink
from runtime.clock import Clock
from runtime.errors import Retryable

log = logging.getLogger(__name__)

# Slack waits three seconds for an answer; a sink that needs longer is asked to retry.
_RETRY_LATER = {"error": "temporarily unavailable"}
_REVOKING_EVENTS = frozenset({"app_uninstalled", "tokens_revoked"})


class Workspaces(Protocol):
    """Who Keel is in each Slack workspace, a client there, and forgetting a workspace that
    removed Keel."""

    async def identity(self, team_id: str | None) -> SlackIdentity | None: ...

    async def client(self, team_id: str) -> AsyncWebClient: ...

    async def revoke(self, team_id: str, event: dict[str, Any]) -> None: ...


class _FromWorkspaces(AsyncAuthorize):
    """Bolt's authorize step, answered from Keel's records (never auth.test per request)."""

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces

    async def __call__(
        self, *, context: Any, enterprise_id: str | None, team_id: str | None, **_: Any
    ) -> AuthorizeResult | None:
        identity = await self.workspaces.identity(team_id)
        if identity is None:
            return None  # not installed there (or removed): bolt acknowledges and drops it
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=identity.team_id,
            bot_user_id=identity.bot_user_id,
            bot_id=identity.bot_id,
        )


def build_bolt_app(
    workspaces: Workspaces,
    sink: SignalSink,
    clock: Clock,
    *,
    api_url: str,
    oauth_flow: AsyncOAuthFlow | None = None,
) -> AsyncApp:
    """The bolt app; request signatures are checked once, by the HTTP route, before it."""
    app = AsyncApp(
        signing_secret="",
        # An AsyncAuthorize (not a plain function) may sit beside an OAuth flow.
        authorize=_FromWorkspaces(workspaces),  # type: ignore[arg-type]
        oauth_flow=oauth_flow,
        # A client is still built per request; it points at our API base URL.
        client=AsyncWebClient(base_url=api_url, retry_handlers=[]),
        request_verification_enabled=False,
        ignoring_self_events_enabled=False,
        ssl_check_enabled=False,
    )
    app.use(_Ingest(workspaces, sink, clock))
    register_actions(app, workspaces, sink, clock)
    return app


class _Ingest(AsyncMiddleware):
    """Runs after authorization: translate the envelope and hand it to the sink."""

    def __init__(self, workspaces: Workspaces, sink: SignalSink, clock: Clock) -> None:
        self.workspaces = workspaces
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
        kind = envelope.get("type")
        if kind == "app_rate_limited":
            return BoltResponse(status=200, body="")  # a notice to us, not an event to route
        if kind != "event_callback":
            return await next()  # button clicks: bolt's action listeners
        outcome = await self._translated(req, envelope)
        try:
            await self.sink.accept(
                outcome,
                provider="slack",
                delivery_id=delivery_id(envelope),
                raw_kind=_raw_kind(envelope),
            )
        except Retryable:
            return retry_later()
        return BoltResponse(status=200, body="")

    async def _translated(
        self, req: AsyncBoltRequest, envelope: dict[str, Any]
    ) -> Signal | Ignored:
        foreign = foreign_workspace(authorised_team(req), envelope.get("team_id"))
        if foreign is not None:
            return foreign  # nor may it revoke anything
        await self._revoke_if_removed(envelope)
        return signal_from_slack_event(
            envelope, identity_of(req, envelope), received_at=self.clock.now()
        )

    async def _revoke_if_removed(self, envelope: dict[str, Any]) -> None:
        event = envelope.get("event")
        team = envelope.get("team_id")
        if isinstance(event, dict) and event.get("type") in _REVOKING_EVENTS and team:
            log.warning("Slack workspace %s: %s; its installation is removed", team, event["type"])
            await self.workspaces.revoke(str(team), event)


def authorised_team(req: AsyncBoltRequest) -> str | None:
    """The workspace authorize found Keel's bot in (the token's own, in single-token mode)."""
    found = req.context.authorize_result
    return found.team_id if found is not None else None


def identity_of(req: AsyncBoltRequest, envelope: dict[str, Any]) -> SlackIdentity:
    """Our bot in the request's workspace, as authorize found it."""
    context = req.context
    return SlackIdentity(
        team_id=str(context.team_id or envelope.get("team_id") or ""),
        bot_user_id=str(context.bot_user_id or ""),
        bot_id=str(context.bot_id or ""),
        # The app a delivery is addressed to is, by definition, this app.
        app_id=str(envelope.get("api_app_id") or ""),
    )


def retry_later() -> BoltResponse:
    """503 over HTTP; over Socket Mode any non-200 leaves the envelope unacknowledged."""
    headers: dict[str, str | Sequence[str]] = {
        "Content-Type": "application/json",
        "Retry-After": "5",
    }
    return BoltResponse(status=503, body=json.dumps(_RETRY_LATER), headers=headers)


def delivery_id(envelope: dict[str, Any]) -> str:
    event_id = envelope.get("event_id")
    if isinstance(event_id, str) and event_id:
        return event_id
    # No event id to dedupe on: the payload itself is the identity of a redelivery, taken
    # in a canonical form so that HTTP and Socket Mode name one delivery alike.
    body = json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "body:" + hashlib.sha256(body.encode()).hexdigest()[:32]


def _raw_kind(envelope: dict[str, Any]) -> str:
    event = envelope.get("event")
    if isinstance(event, dict) and isinstance(event.get("type"), str):
        return str(event["type"])
    return str(envelope.get("type") or "unknown")
