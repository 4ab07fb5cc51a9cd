"""GitHub's error answers in Keel's error vocabulary (Retryable, NotFound, Permanent)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from runtime.errors import NotFound, Permanent, Retryable

if TYPE_CHECKING:  # PyGithub is imported where a call is made (idle RSS, #19)
    from github import GithubException


def translate_github_error(error: GithubException) -> Exception:
    """Retryable for rate limits and server errors; NotFound for 404; otherwise Permanent."""
    message = f"GitHub {error.status}: {message_of(error)}"
    headers = {k.lower(): v for k, v in (error.headers or {}).items()}
    if error.status == 429 or (error.status == 403 and _rate_limited(message, headers)):
        return Retryable(message, retry_after_s=_retry_after(headers))
    if error.status == 404:
        return NotFound(message)
    if error.status >= 500:
        return Retryable(message)
    return Permanent(message)


def _rate_limited(message: str, headers: dict[str, str]) -> bool:
    return (
        "retry-after" in headers
        or headers.get("x-ratelimit-remaining") == "0"
        or "rate limit" in message.lower()
    )


def _retry_after(headers: dict[str, str]) -> float | None:
    if (after := headers.get("retry-after", "")).isdigit():
        return float(after)
    if (reset := headers.get("x-ratelimit-reset", "")).isdigit():
        return max(0.0, float(reset) - time.time())
    # GitHub asks for at least a minute's pause after a secondary limit without a header.
    return 60.0


def message_of(error: GithubException) -> str:
    data: Any = error.data
    if isinstance(data, dict):
        text = str(data.get("message", ""))
        details = [_detail(e) for e in data.get("errors") or []]
        return "; ".join([text, *details]) if details else text
    return str(data)


def _detail(error: Any) -> str:
    # Validation errors are objects; some answers (a review's 422) give plain sentences.
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code"))
    return str(error)
