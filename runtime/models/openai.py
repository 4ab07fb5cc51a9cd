"""The OpenAI-compatible chat-completions provider (OpenAI, vLLM, Ollama, LiteLLM), on the
official ``openai`` SDK.

The SDK owns the HTTP: ``AsyncOpenAI(base_url, api_key, timeout)``, auth headers, and its typed
errors, which are mapped here to Keel's: ``RateLimitError`` (429, ``Retry-After`` honoured),
``InternalServerError`` (5xx), 408/425 and ``APIConnectionError``/``APITimeoutError`` are
retried; ``AuthenticationError``/``PermissionDeniedError`` are ``Permanent`` at once; a refusal
whose words say the window is full is ``ContextLengthExceeded``; any other refusal is
``Permanent``. Retries are Keel's (``runtime.models.faults.Retries``), the SDK's are off
(``max_retries=0``): see that module for why. The body is built by ``openai_wire`` and a 2xx
is read from the raw response, so a 200 that is not a completion (a gateway's page, an error
object) is retried like a 5xx instead of becoming an empty answer.

The API key is a secret: the SDK sends it as a Bearer header; it never appears in a message or
a repr. With no key configured (a local Ollama), no Authorization header is sent at all.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import httpx2
import openai

from runtime.errors import Permanent
from runtime.models.base import ModelRequest, ModelResponse
from runtime.models.faults import (
    Retries,
    Sleep,
    Transient,
    Wording,
    answered,
    connection_failure,
    sdk_options,
    server_message,
)
from runtime.models.openai_wire import (
    WireCompletion,
    read_completion,
    request_body,
    response_of,
)

__all__ = ["OPTIONAL_FIELDS", "OpenAIProvider", "request_body"]

log = logging.getLogger(__name__)

# Optional fields of ours a server may not know; dropped (once, with a warning) if refused.
OPTIONAL_FIELDS = ("max_tokens", "tool_choice", "parallel_tool_calls")
# The SDK insists on a key; with none configured it is given this and told to send no header.
_NO_KEY = "keel-no-api-key"


class OpenAIProvider:
    """A ``ModelProvider`` for any server speaking the OpenAI chat-completions API.

    ``base_url`` includes the version prefix (``http://host:8000/v1``). ``max_retries`` counts
    retries after the first attempt. A ``Retry-After`` longer than ``max_retry_after_s`` is not
    slept through: the call fails at once with ``ProviderUnavailable(retry_after_s=...)`` so
    the executor can reschedule instead of holding a worker. ``transport`` (the SDK's httpx2)
    stays the caller's: it is never closed here.
    """

    __slots__ = (
        "_api_key",
        "_dropped",
        "_retries",
        "_timeout_s",
        "_transport",
        "_wording",
        "base_url",
        "model",
    )

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        transport: httpx2.AsyncBaseTransport | None = None,
        *,
        sleep: Sleep | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        max_retry_after_s: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key or None
        self._timeout_s = timeout_s
        self._transport = transport
        self._retries = Retries(
            max_retries,
            sleep or asyncio.sleep,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            max_retry_after_s=max_retry_after_s,
        )
        self._wording = Wording(self.base_url, self._api_key)
        self._dropped: set[str] = set()

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.base_url!r}, model={self.model!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        async with self._client() as client:
            while True:
                body = request_body(self.model, request, dropped=self._dropped)
                try:
                    completion = await self._retries.run(
                        f"{self.base_url}/chat/completions", partial(self._attempt, client, body)
                    )
                    break
                except _Refused as e:
                    self._drop(e, body)
        return response_of(completion, turn=request.turn)

    def _drop(self, refused: _Refused, body: dict[str, Any]) -> None:
        """Leave out an optional field the server named as unknown; else fail permanently."""
        named = [f for f in OPTIONAL_FIELDS if f in body and f in refused.detail]
        if not named:
            raise Permanent(str(refused)) from refused
        log.warning(
            "model provider at %s refused %r; sending requests without it", self.base_url, named[0]
        )
        self._dropped.add(named[0])

    def _client(self) -> openai.AsyncOpenAI:
        options = sdk_options(self.base_url, self._timeout_s, self._transport)
        return openai.AsyncOpenAI(api_key=self._api_key or _NO_KEY, **options)

    async def _attempt(
        self, client: openai.AsyncOpenAI, body: dict[str, Any]
    ) -> WireCompletion | Transient:
        try:
            # With no key, the SDK is told to send no Authorization header (a local Ollama).
            omit = {"Authorization": openai.Omit()} if self._api_key is None else None
            raw = await client.chat.completions.with_raw_response.create(**body, extra_headers=omit)
        except (openai.APIConnectionError, httpx2.InvalidURL) as e:  # timeouts included
            return connection_failure(e, self._wording)
        except openai.APIStatusError as e:
            return self._refusal(e)
        return self._completion(raw.http_response)

    def _refusal(self, error: openai.APIStatusError) -> Transient:
        """A non-2xx answer as a ``Transient`` to retry, else the Keel error it raises."""
        transient = isinstance(error, openai.RateLimitError | openai.InternalServerError)
        outcome = answered(
            error.status_code, error.response, self._wording, self.model, transient=transient
        )
        if isinstance(outcome, Transient):
            return outcome
        if type(outcome) is Permanent and isinstance(
            error, openai.BadRequestError | openai.UnprocessableEntityError
        ):
            raise _Refused(str(outcome), server_message(error.response)) from error
        raise outcome from error

    def _completion(self, response: httpx2.Response) -> WireCompletion | Transient:
        """A 2xx that is not a completion is a fault of the provider, retried like a 5xx."""
        found = read_completion(response.content)
        if isinstance(found, WireCompletion):
            return found
        problem = self._wording.public(found)
        return Transient(
            f"HTTP {response.status_code} with {problem}", None, self._wording.head(response)
        )


class _Refused(Permanent):
    """A 400/422 that may name an optional field the server does not accept."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail
