"""Admin access to the operator API and UI.

Bound to loopback, nobody else can reach the server, so no token is asked for. Bound to any
other address, every request must carry the admin token (compared in constant time); with
no token configured there is no way in at all, which is safer than an open admin surface.
Browsers may present the token once as ``?token=`` and then carry it in a cookie, marked
``Secure`` when people reach Keel over HTTPS: ``server.public_url`` is https, or the request
came over https (directly, or as ``X-Forwarded-Proto`` from a proxy uvicorn trusts, see its
``--forwarded-allow-ips``).
"""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

from adapters.config import ServerConfig

TOKEN_COOKIE = "keel_admin_token"
TOKEN_QUERY = "token"


class AdminAuth:
    """FastAPI dependencies: ``api`` reads the bearer header; ``ui`` also the query and cookie."""

    def __init__(self, server: ServerConfig) -> None:
        self._open = server.is_loopback
        secret = server.admin_token
        self._token = None if secret is None else secret.get_secret_value().encode()

    async def api(self, request: Request) -> None:
        self._check(_bearer(request))

    async def ui(self, request: Request) -> None:
        presented = (
            _bearer(request)
            or request.query_params.get(TOKEN_QUERY)
            or request.cookies.get(TOKEN_COOKIE)
        )
        self._check(presented)

    def _check(self, presented: str | None) -> None:
        if self._open:
            return
        if self._token is None:
            raise HTTPException(
                403,
                "the server is not bound to loopback and has no admin token: "
                "set server.admin_token (KEEL_ADMIN_TOKEN) to use the API and UI",
            )
        if presented is None or not hmac.compare_digest(presented.encode(), self._token):
            raise HTTPException(
                401,
                "missing or wrong admin token (send Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )


def cookie_is_secure(request: Request, public_url: str | None) -> bool:
    """Whether the browser reaches us over HTTPS, so the token cookie must never go over HTTP."""
    return request.url.scheme == "https" or (public_url or "").lower().startswith("https://")


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None
