"""The error hierarchy: whether a failure may be retried is part of its type.

Foreign exceptions (httpx, SlackApiError, GithubException, SQLAlchemy) are translated once at
the edge where they occur, with ``raise ... from e``.
"""

from __future__ import annotations


class KeelError(Exception):
    """Base of every error Keel raises on purpose."""


class Retryable(KeelError):
    """A transient failure: the same operation may succeed if tried again later."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ProviderUnavailable(Retryable):
    """The model provider gave no usable answer (5xx, 429, a dropped connection, a 200 that is
    not a completion): an outage to wait out, not a fault of the task. The message is fit for
    people; the provider's address and raw bodies are logged where the failure is seen."""


class Permanent(KeelError):
    """A failure that repeating will not fix (bad credentials, invalid request, policy)."""


class UnknownAgent(Permanent):
    """A task names an agent the configuration does not define."""


class ConfigError(Permanent):
    """The configuration is invalid; the message names the offending key."""


class UnknownSchema(Permanent):
    """The database is at a schema revision this code does not know (a newer Keel's, or an
    unreleased branch's): upgrading cannot go on from it."""


class StaleWrite(KeelError):
    """An optimistic version check failed: another writer advanced the record first."""


class NotFound(Permanent):
    """A record or remote object that was expected to exist does not."""


class ContextLengthExceeded(Permanent):
    """The provider refused a request as longer than the model's context window: compacting
    the conversation and asking again may succeed, repeating the same request will not."""
