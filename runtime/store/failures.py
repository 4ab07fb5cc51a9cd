"""What a failed transaction means: whether running it again is the remedy."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from runtime.errors import Retryable

# PostgreSQL ended the transaction to break a deadlock or a serialization conflict: running
# it again is the remedy (a webhook answers 503 and is delivered again; a worker claims or
# ticks again).
_CONFLICTS = frozenset({"40P01", "40001"})
_CONFLICT = "the transaction conflicted with another and was rolled back: try again"


def retryable(error: DBAPIError) -> Retryable | None:
    """What a transaction that failed with ``error`` raises when running it again is the
    remedy (a conflict, or the database briefly away); None when it would fail the same way."""
    if is_conflict(error):
        return Retryable(_CONFLICT)
    if _is_transient(error):
        return Retryable(f"database unavailable: {type(error.orig).__name__}")
    return None


def is_conflict(error: DBAPIError) -> bool:
    return getattr(error.orig, "sqlstate", None) in _CONFLICTS


def _is_transient(error: DBAPIError) -> bool:
    if error.connection_invalidated:
        return True
    text = str(error.orig).lower()
    markers = ("database is locked", "connection", "server closed", "could not connect", "timeout")
    return any(m in text for m in markers)
