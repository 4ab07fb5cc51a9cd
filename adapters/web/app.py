"""The composition root of ``keel serve``: ``create_app(config)`` wires everything.

The lifespan connects to the providers, starts the workers and the outbox, and on shutdown
(SIGTERM) stops claiming, lets each loop finish or hand on its phase, and closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from adapters.assembly import Keel
from adapters.config import AppConfig
from adapters.github.webhook import GitHubWebhook
from adapters.sandbox_check import sandbox_status
from adapters.slack.app import SlackEvents
from adapters.web.api import TaskDesk, build_api
from adapters.web.auth import TOKEN_QUERY, AdminAuth
from adapters.web.ingress import create_ingress_router, install_ingress
from adapters.web.metrics import build_metrics
from adapters.web.ui import build_ui
from runtime.store.migrate import head_from_files, head_revision
from runtime.version import VERSION


class _Late:
    """A webhook route whose handler is built at startup (it needs the bot's identity)."""

    def __init__(self, build: Callable[[], SlackEvents | GitHubWebhook | None]) -> None:
        self._build = build
        self._handler: SlackEvents | GitHubWebhook | None = None

    def ready(self) -> None:
        self._handler = self._build()

    async def handle(self, request: Request) -> Response:
        if self._handler is None:
            return _starting_up()
        return await self._handler.handle(request)

    async def install(self, request: Request) -> Response:
        if not isinstance(self._handler, SlackEvents):
            return _starting_up()
        return await self._handler.install(request)


def _starting_up() -> Response:
    return JSONResponse({"error": "starting up"}, status_code=503, headers={"Retry-After": "2"})


def create_app(config: AppConfig, *, keel: Keel | None = None, workers: bool = True) -> FastAPI:
    keel = keel or Keel(config)
    slack_config = config.slack
    http_events = slack_config.enabled and not slack_config.socket_mode
    slack = _Late(lambda: keel.slack.http_routes() if keel.slack else None) if http_events else None
    install = (
        _Late(lambda: keel.slack.install_routes() if keel.slack else None)
        if slack_config.enabled and slack_config.multi_workspace
        else None
    )
    github = (
        _Late(lambda: keel.github_webhook)
        if config.github.enabled
        else None
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(keel.migrate)
        await keel.connect()
        for route in (slack, install, github):
            if route is not None:
                route.ready()
        await keel.start(workers=workers)
        if keel.slack is not None:
            await keel.slack.start_socket_mode()
        try:
            yield
        finally:
            if keel.slack is not None:
                await keel.slack.stop()  # stop receiving before the workers stop
            await keel.stop()

    # FastAPI's own /docs, /redoc and /openapi.json would be open to anyone who can reach the
    # server; the guarded ones below ask for the admin token off loopback.
    app = FastAPI(
        title="Keel",
        version=VERSION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.keel = keel
    install_ingress(
        app,
        create_ingress_router(slack=slack, github=github, slack_install=install),
        body_limit_bytes=config.server.body_limit_bytes,
    )
    _mount_health(app, keel)
    auth = AdminAuth(config.server)
    desk = TaskDesk(
        keel.scheduler,
        agents=config.agents,
        default_agent=keel.router.policy.default_agent,
        repo_known=keel.checkouts.knows,
        public_url=config.server.public_url,
    )
    app.include_router(build_api(keel.db, keel.scheduler, auth=auth.api, desk=desk))
    app.include_router(
        build_ui(keel.db, auth=auth.ui, public_url=config.server.public_url, desk=desk)
    )
    metrics_auth = None if config.server.metrics_public else auth.api
    app.include_router(build_metrics(keel.db, keel.metrics, auth=metrics_auth))
    _mount_docs(app, auth)
    return app


def _mount_docs(app: FastAPI, auth: AdminAuth) -> None:
    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(auth.ui)])
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(auth.ui)])
    async def docs(request: Request) -> HTMLResponse:
        # The page fetches the schema itself; a token it was opened with goes along.
        token = request.query_params.get(TOKEN_QUERY)
        schema = f"/openapi.json?{urlencode({TOKEN_QUERY: token})}" if token else "/openapi.json"
        return get_swagger_ui_html(openapi_url=schema, title="Keel API")


def _mount_health(app: FastAPI, keel: Keel) -> None:
    @app.get("/", include_in_schema=False)
    async def home(request: Request) -> RedirectResponse:
        """Where a person opening the server's address wants to be: the task list (which
        asks for the token itself), with a token the address carried kept along."""
        token = request.query_params.get(TOKEN_QUERY)
        query = f"?{urlencode({TOKEN_QUERY: token})}" if token else ""
        return RedirectResponse(f"/ui/tasks{query}", status_code=307)

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        """The process is up."""
        return {"ok": True}

    # Read from the revision files as text: Alembic (with Mako) stays unloaded unless they
    # say more than that reads (a merge), as for `upgrade` (idle RSS, #19).
    head = head_from_files() or head_revision()

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """The database answers, its schema is current, and commands can run as configured.

        ``schema`` says the revision the database is at and the code's head: not ready while
        they differ. ``workspace.sandbox: auto``/``bwrap`` without a working bubblewrap is not
        ready: every command would be refused. ``none`` is ready, with a warning in every
        answer, so that running commands unsandboxed is never silent.
        """
        sandbox = await sandbox_status(keel.config.workspace.sandbox)
        extra: dict[str, object] = {"warnings": [sandbox.warning]} if sandbox.warning else {}
        try:
            revision = await keel.db.schema_revision()
        except Exception as e:  # loop boundary: any failure means not ready
            return _not_ready(type(e).__name__, {**extra, "schema": {"code": head}})
        extra["schema"] = {"database": revision, "code": head}
        if revision != head:
            return _not_ready("migrations pending", extra)
        if not sandbox.ok:
            return _not_ready("sandbox unavailable", {**extra, "detail": sandbox.line})
        return JSONResponse({"ready": True, **extra})


def _not_ready(error: str, extra: dict[str, object]) -> JSONResponse:
    return JSONResponse({"ready": False, "error": error, **extra}, status_code=503)

