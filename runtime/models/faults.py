"""Keel's retry policy for model providers, shared by every SDK-backed provider.

The official SDKs (``openai``, ``anthropic``) own the wire: requests, auth headers, typed
errors. Retrying is Keel's, not the SDK's (the SDKs are built with ``max_retries=0``): the SDK
would sleep on its own clock, cap ``Retry-After`` silently and retry a 200 that is not a
completion never; Keel's loop sleeps through an injected ``sleep`` (tests and the clock port),
fails at once with ``ProviderUnavailable(retry_after_s=...)`` when ``Retry-After`` is longer
than a worker should hold a task (the executor reschedules instead), and counts every attempt
in one message fit for people.

Error messages reach people (a failed task's reply), so they name neither the provider's
address nor a body that is not the server's own JSON explanation: those go to the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import httpx2

from runtime.errors import ContextLengthExceeded, Permanent, ProviderUnavailable

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")

SNIPPET = 300
TRANSIENT_STATUS = frozenset({408, 425, 429})
AUTH_STATUS = frozenset({401, 403})
# How servers say a request is longer than the model's window (OpenAI, vLLM, LiteLLM, Ollama,
# and Anthropic's "prompt is too long").
CONTEXT_LENGTH = re.compile(
    r"context[_ ]length|maximum context|context window|too many tokens|prompt is too long", re.I
)
_ADDRESS = re.compile(r"\b(?:https?|wss?)://\S+", re.I)


class HTTPResponse(Protocol):
    """What is read of a failed response: httpx's and the SDKs' httpx2's alike."""

    @property
    def content(self) -> bytes: ...
    @property
    def reason_phrase(self) -> str: ...
    @property
    def headers(self) -> Any: ...
    def json(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Transient:
    """A failed attempt that a later attempt may get past: ``reason`` is fit for people,
    ``logged`` (the body's first bytes, an exception's text) is for the log only."""

    reason: str
    retry_after_s: float | None
    logged: str = ""


@dataclass(frozen=True, slots=True)
class Retries:
    """``max_retries`` retries after the first attempt, exponential backoff with equal jitter,
    ``Retry-After`` honoured up to ``max_retry_after_s``."""

    max_retries: int = 4
    sleep: Sleep = asyncio.sleep
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    max_retry_after_s: float = 60.0

    async def run(self, where: str, attempt: Callable[[], Awaitable[T | Transient]]) -> T:
        attempts = self.max_retries + 1
        for number in range(attempts):
            outcome = await attempt()
            if not isinstance(outcome, Transient):
                return outcome
            log.warning(
                "model provider at %s, attempt %d of %d: %s%s",
                where,
                number + 1,
                attempts,
                outcome.reason,
                f"; body starts {outcome.logged!r}" if outcome.logged else "",
            )
            delay = self.delay(number, outcome)
            if number + 1 == attempts or delay is None:
                raise ProviderUnavailable(
                    f"model provider failed after {number + 1} attempt(s): {outcome.reason}",
                    retry_after_s=outcome.retry_after_s,
                )
            await self.sleep(delay)
        raise AssertionError("unreachable: the last attempt always returns or raises")

    def delay(self, attempt: int, failure: Transient) -> float | None:
        """Seconds to wait before the next attempt, or None when waiting here is pointless."""
        if failure.retry_after_s is not None:
            if failure.retry_after_s > self.max_retry_after_s:
                return None
            return failure.retry_after_s
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0**attempt)
        # Equal jitter: never less than half the ceiling, so backoff still grows per attempt.
        return ceiling / 2 + random.uniform(0, ceiling / 2)


@dataclass(frozen=True, slots=True)
class Wording:
    """Turns a server's words into text fit for a reply: no key, no address."""

    base_url: str
    secret: str | None

    def public(self, text: str) -> str:
        host = urlsplit(self.base_url).hostname
        text = _ADDRESS.sub("[address]", self.redact(text))
        return text.replace(host, "[address]") if host else text

    def redact(self, text: str) -> str:
        return text.replace(self.secret, "***") if self.secret else text

    def head(self, response: HTTPResponse) -> str:
        """The body's first bytes, for the log."""
        return self.redact(response.content[:SNIPPET].decode("utf-8", "replace"))


def server_message(response: HTTPResponse) -> str:
    """The server's own explanation of a failure, from the common JSON error shapes; a body
    that is not JSON (a gateway's page) is described, not quoted."""
    try:
        payload = response.json()
    except ValueError:
        return (
            describe_body(response.content)
            if response.content.strip()
            else (response.reason_phrase)
        )
    return error_text(payload)[:SNIPPET]


def describe_body(content: bytes) -> str:
    """What a body that is not JSON is, without its bytes: they may hold internal hosts."""
    head = content[:1024].lstrip().lower()
    if not head:
        return "an empty body"
    if head.startswith((b"<!doctype html", b"<html")) or b"<html" in head:
        return f"an HTML page instead of JSON ({len(content)} bytes)"
    return f"a body that is not JSON ({len(content)} bytes)"


def error_text(payload: Any) -> str:
    if not isinstance(payload, dict):
        return json.dumps(payload)
    error = payload.get("error", payload)
    if isinstance(error, dict):
        found = error.get("message") or error.get("detail")
        return str(found) if found is not None else json.dumps(error)
    return str(error)


def retry_after(response: HTTPResponse) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def connection_failure(error: BaseException, wording: Wording) -> Transient:
    """An SDK's ``APIConnectionError``/``APITimeoutError`` (or httpx2's own error) as an
    attempt to retry; a base URL no request can use is ``Permanent`` at once."""
    cause = error.__cause__ or error
    if isinstance(cause, httpx2.UnsupportedProtocol | httpx2.InvalidURL):
        log.error("model provider base_url %r is not usable: %s", wording.base_url, cause)
        raise Permanent(f"the configured model base_url is not usable ({type(cause).__name__})")
    return Transient(type(cause).__name__, None, wording.redact(str(cause)))


def answered(
    status: int, response: HTTPResponse, wording: Wording, model: str, *, transient: bool
) -> Transient | Permanent:
    """A non-2xx answer as an attempt to retry (``transient``: the SDK's typed error says so,
    or the status does), else the Keel error to raise."""
    detail = wording.public(server_message(response))
    if transient or status in TRANSIENT_STATUS or status >= 500:
        return Transient(f"HTTP {status}: {detail}", retry_after(response), wording.head(response))
    return refused(status, detail, model)


def sdk_http_client(
    transport: httpx2.AsyncBaseTransport | None, timeout_s: float
) -> httpx2.AsyncClient:
    """The SDK's HTTP client; a transport handed in stays the caller's (never closed here)."""
    borrowed = Borrowed(transport) if transport is not None else None
    return httpx2.AsyncClient(transport=borrowed, timeout=timeout_s, follow_redirects=False)


def sdk_options(
    base_url: str, timeout_s: float, transport: httpx2.AsyncBaseTransport | None
) -> dict[str, Any]:
    """What either SDK's client is built with: retries are Keel's (``max_retries=0``), the
    HTTP client follows no redirect, and the caller's transport stays the caller's."""
    return {
        "base_url": base_url,
        "timeout": timeout_s,
        "max_retries": 0,
        "default_headers": {"User-Agent": "keel-bot"},
        "http_client": sdk_http_client(transport, timeout_s),
    }


def refused(status: int, detail: str, model: str) -> Permanent:
    """The Keel error for a refusal no retry gets past: a rejected key, a full window, or
    anything else the server said no to (``detail`` is already fit for people)."""
    log.warning("model provider answered HTTP %d: %s", status, detail)
    if status in AUTH_STATUS:
        return Permanent(
            f"model provider rejected the API key (HTTP {status}); "
            f"check the api key configured for model {model!r}. Server said: {detail}"
        )
    message = f"model provider refused the request for model {model!r} (HTTP {status}): {detail}"
    if CONTEXT_LENGTH.search(detail):
        return ContextLengthExceeded(message)
    return Permanent(message)


class Borrowed(httpx2.AsyncBaseTransport):
    """Delegates requests to a caller-owned transport and leaves its lifecycle to the caller."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        return None
