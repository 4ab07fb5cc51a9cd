"""Admin access to the operator API and UI.

Two checks, the Host first. A request must name Keel by a host it serves: loopback, the host
of ``server.public_url``, or the one address Keel is bound to. Anything else is refused
(421) before any handler runs: a web page that rebinds its own name to Keel's address (DNS
rebinding) reaches the socket, but its requests carry its own name.

Then the admin token: once ``server.admin_token`` is set, every request must carry it
(compared in constant time), from loopback too; local users, and a sandboxed command given
the network, reach loopback as well. With no token, a server bound to loopback is open (the
zero-configuration default) and any other server has no way in at all, which is safer than
an open admin surface. Browsers may present the token once as ``?token=`` and then carry it
in a cookie, marked ``Secure`` when people reach Keel over HTTPS: ``server.public_url`` is
https, or the request came over https (directly, or as ``X-Forwarded-Proto`` from a proxy
uvicorn trusts, see its ``--forwarded-allow-ips``).
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from adapters.config import ServerConfig

TOKEN_COOKIE = "keel_admin_token"
TOKEN_QUERY = "token"


class AdminAuth:
    """FastAPI dependencies: ``api`` reads the bearer header; ``ui`` also the query and cookie."""

    def __init__(self, server: ServerConfig) -> None:
        secret = server.admin_token
        self._token = None if secret is None else secret.get_secret_value().encode()
        self._open = self._token is None and server.is_loopback
        self._hosts = server.served_hosts

    async def api(self, request: Request) -> None:
        self._check(request, _bearer(request))

    async def ui(self, request: Request) -> None:
        presented = (
            _bearer(request)
            or request.query_params.get(TOKEN_QUERY)
            or request.cookies.get(TOKEN_COOKIE)
        )
        self._check(request, presented)

    def _check(self, request: Request, presented: str | None) -> None:
        host = request.headers.get("host", "")
        if not is_served_host(host, self._hosts):
            raise HTTPException(
                421,
                f"Host {host!r} is not this server's: use loopback or the host of "
                "server.public_url (KEEL_PUBLIC_URL)",
            )
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


def is_served_host(host_header: str, served: frozenset[str]) -> bool:
    """Whether a ``Host`` header (``name[:port]``, ``[v6]:port``) names loopback or a
    served host; an empty or unreadable one names nothing."""
    try:
        name = urlsplit(f"//{host_header}").hostname
    except ValueError:
        return False
    if not name:
        return False
    name = name.rstrip(".")
    if name == "localhost" or name in served:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cookie_is_secure(request: Request, public_url: str | None) -> bool:
    """Whether the browser reaches us over HTTPS, so the token cookie must never go over HTTP."""
    return request.url.scheme == "https" or (public_url or "").lower().startswith("https://")


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


async def same_origin(request: Request) -> None:
    """A browser names the page a POST comes from (``Origin``); one from another site's page
    is refused before it acts, token or no token (a loopback Keel without one is open). Every
    POST of the API and the UI depends on it."""
    origin = request.headers.get("origin")
    if origin is None:
        return  # not a browser's cross-site request: curl, the API's clients
    host = request.headers.get("host", "")
    if origin in ("null", "") or urlsplit(origin).netloc != host:
        raise HTTPException(403, f"cross-site request from {origin!r} refused")
