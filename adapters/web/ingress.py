"""Webhook ingress: the routes Slack and GitHub call, and the body-size limit in front of them.

The routes verify, translate and hand each outcome to a ``SignalSink`` (``routing/sink.py``),
and answer only after the sink returned (the sink commits the Signal and its route decision).
A sink that raises ``Retryable`` (the database is away) turns into 503, so the provider
delivers again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Protocol

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from adapters.slack.app import (
    SLACK_EVENTS_PATH,
    SLACK_INSTALL_PATH,
    SLACK_INTERACTIVITY_PATH,
    SLACK_REDIRECT_PATH,
)

GITHUB_WEBHOOK_PATH = "/github/webhook"
__all__ = ["GITHUB_WEBHOOK_PATH", "create_ingress_router"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class WebhookRoute(Protocol):
    async def handle(self, request: Request) -> Response: ...


class InstallRoute(Protocol):
    async def install(self, request: Request) -> Response: ...


def create_ingress_router(
    *,
    slack: WebhookRoute | None = None,
    github: WebhookRoute | None = None,
    slack_install: InstallRoute | None = None,
) -> APIRouter:
    """The webhook routes of the surfaces that are enabled: ``POST /slack/events`` and
    ``/slack/interactivity`` (one handler: bolt tells them apart), ``POST /github/webhook``,
    and the Slack install flow's two pages when OAuth is on."""
    router = APIRouter()
    if slack is not None:
        router.add_api_route(SLACK_EVENTS_PATH, slack.handle, methods=["POST"])
        router.add_api_route(SLACK_INTERACTIVITY_PATH, slack.handle, methods=["POST"])
    if github is not None:
        router.add_api_route(GITHUB_WEBHOOK_PATH, github.handle, methods=["POST"])
    if slack_install is not None:
        for path in (SLACK_INSTALL_PATH, SLACK_REDIRECT_PATH):
            router.add_api_route(path, slack_install.install, methods=["GET"])
    return router


Endpoint = Callable[[Request], Awaitable[Response]]


def install_ingress(app: FastAPI, router: APIRouter, *, body_limit_bytes: int) -> None:
    """Mount the routes behind the body-size limit (call while building the app)."""
    app.include_router(router)  # documented, and what answers a method they do not take
    endpoints = {
        (route.path, method): route.endpoint
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }
    app.add_middleware(WebhookMiddleware, limit_bytes=body_limit_bytes, endpoints=endpoints)


class WebhookMiddleware:
    """Refuse a body over the limit with 413 before any route reads or parses it, then hand
    the request straight to its webhook handler.

    The body is buffered (it is small by construction) and replayed to the route, so a sender
    that lies in Content-Length or streams chunks is held to the same limit. The handlers take
    a Starlette request and need nothing of FastAPI's routing, dependencies and exception
    middleware, which cost about as much CPU per delivery as a bare endpoint's whole work.
    """

    def __init__(
        self, app: ASGIApp, *, limit_bytes: int, endpoints: Mapping[tuple[str, str], Endpoint]
    ) -> None:
        self.app = app
        self.limit_bytes = limit_bytes
        self.endpoints = endpoints
        self.paths = frozenset(path for path, _ in endpoints)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        if self._declared_too_big(scope):
            await _too_large(scope, receive, send)
            return
        body = await _read_at_most(receive, self.limit_bytes)
        if body is None:
            await _too_large(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        endpoint = self.endpoints.get((scope["path"], scope["method"]))
        if endpoint is None:
            await self.app(scope, replay, send)  # a method the route does not take: 405
            return
        response = await endpoint(Request(scope, replay))
        await response(scope, replay, send)

    def _declared_too_big(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"content-length":
                return not value.isdigit() or int(value) > self.limit_bytes
        return False


async def _read_at_most(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _too_large(scope: Scope, receive: Receive, send: Send) -> None:
    response = Response(
        '{"error": "payload too large"}', status_code=413, media_type="application/json"
    )
    await response(scope, receive, send)
