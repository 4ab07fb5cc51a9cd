"""The OpenAI-compatible chat-completions provider (OpenAI, vLLM, Ollama, LiteLLM).

Owns the wire format of ``POST {base_url}/chat/completions`` in both directions, the retry
policy for provider faults (429 with ``Retry-After``, 5xx, timeouts and dropped connections,
and a 200 whose body is not a completion: a gateway's HTML page, an error object), with
exponential backoff and jitter, ending in ``ProviderUnavailable``; and the translation of every
other failure into ``Permanent`` with a message an operator can act on.

Error messages reach people (a failed task's reply), so they name neither the provider's
address nor a body that is not the server's own JSON explanation: those go to the log. The API
key is a secret: it is sent only as a Bearer header and never appears in a message or a repr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, assert_never
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from runtime.errors import ContextLengthExceeded, Permanent, ProviderUnavailable
from runtime.models.base import (
    AssistantText,
    ImagePart,
    ModelRequest,
    ModelResponse,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    ToolSpec,
    Usage,
    UserText,
    read_arguments,
)

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
OutputItem = AssistantText | Reasoning | ToolCallItem

_TRANSIENT_STATUS = frozenset({408, 425, 429})
_AUTH_STATUS = frozenset({401, 403})
_SNIPPET = 300
# How servers say a request is longer than the model's window (OpenAI, vLLM, LiteLLM, Ollama).
_CONTEXT_LENGTH = re.compile(
    r"context[_ ]length|maximum context|context window|too many tokens|prompt is too long", re.I
)
_ADDRESS = re.compile(r"\b(?:https?|wss?)://\S+", re.I)
# Optional fields of ours a server may not know; dropped (once, with a warning) if refused.
OPTIONAL_FIELDS = ("max_tokens", "tool_choice", "parallel_tool_calls")


class OpenAIProvider:
    """A ``ModelProvider`` for any server speaking the OpenAI chat-completions API.

    ``base_url`` includes the version prefix (``http://host:8000/v1``). ``max_retries`` counts
    retries after the first attempt. A ``Retry-After`` longer than ``max_retry_after_s`` is not
    slept through: the call fails at once with ``ProviderUnavailable(retry_after_s=...)`` so
    the executor can reschedule instead of holding a worker.
    """

    __slots__ = (
        "_api_key",
        "_backoff_base_s",
        "_backoff_max_s",
        "_dropped",
        "_max_retries",
        "_max_retry_after_s",
        "_sleep",
        "_timeout_s",
        "_transport",
        "_url",
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
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        max_retry_after_s: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._url = f"{self.base_url}/chat/completions"
        self._api_key = api_key or None
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._transport = transport
        self._sleep = sleep
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._max_retry_after_s = max_retry_after_s
        self._dropped: set[str] = set()

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.base_url!r}, model={self.model!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        async with self._client() as client:
            while True:
                body = request_body(self.model, request, dropped=self._dropped)
                try:
                    completion = await self._post_with_retries(client, body)
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

    def _client(self) -> httpx.AsyncClient:
        headers = {"User-Agent": "keel-bot"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # A transport handed in belongs to the caller, so closing our client must not close it.
        transport = _Borrowed(self._transport) if self._transport is not None else None
        return httpx.AsyncClient(
            headers=headers, timeout=self._timeout_s, transport=transport, follow_redirects=False
        )

    async def _post_with_retries(
        self, client: httpx.AsyncClient, body: dict[str, Any]
    ) -> _WireCompletion:
        attempts = self._max_retries + 1
        for attempt in range(attempts):
            outcome = await self._attempt(client, body)
            if isinstance(outcome, _WireCompletion):
                return outcome
            log.warning(
                "model provider at %s, attempt %d of %d: %s%s",
                self._url,
                attempt + 1,
                attempts,
                outcome.reason,
                f"; body starts {outcome.logged!r}" if outcome.logged else "",
            )
            delay = self._delay(attempt, outcome)
            if attempt + 1 == attempts or delay is None:
                raise ProviderUnavailable(
                    f"model provider failed after {attempt + 1} attempt(s): {outcome.reason}",
                    retry_after_s=outcome.retry_after_s,
                )
            await self._sleep(delay)
        raise AssertionError("unreachable: the last attempt always returns or raises")

    async def _attempt(
        self, client: httpx.AsyncClient, body: dict[str, Any]
    ) -> _WireCompletion | _Transient:
        try:
            response = await client.post(self._url, json=body)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:
            log.error("model provider base_url %r is not usable: %s", self.base_url, e)
            raise Permanent(
                f"the configured model base_url is not usable ({type(e).__name__})"
            ) from e
        except httpx.TransportError as e:
            return _Transient(type(e).__name__, None, _redact(str(e), self._api_key))
        return self._classify(response)

    def _classify(self, response: httpx.Response) -> _WireCompletion | _Transient:
        status = response.status_code
        if 200 <= status < 300:
            return self._completion(response)
        detail = self._public(server_message(response))
        if status in _TRANSIENT_STATUS or status >= 500:
            return _Transient(
                f"HTTP {status}: {detail}", retry_after(response), self._head(response)
            )
        log.warning("model provider at %s answered HTTP %d: %s", self._url, status, detail)
        if status in _AUTH_STATUS:
            raise Permanent(
                f"model provider rejected the API key (HTTP {status}); "
                f"check the api key configured for model {self.model!r}. Server said: {detail}"
            )
        message = (
            f"model provider refused the request for model {self.model!r} (HTTP {status}): {detail}"
        )
        if _CONTEXT_LENGTH.search(detail):
            raise ContextLengthExceeded(message)
        if status in (400, 422):
            raise _Refused(message, detail)
        raise Permanent(message)

    def _completion(self, response: httpx.Response) -> _WireCompletion | _Transient:
        """A 2xx that is not a completion is a fault of the provider, retried like a 5xx."""
        found = read_completion(response.content)
        if isinstance(found, _WireCompletion):
            return found
        problem = self._public(found)
        return _Transient(f"HTTP {response.status_code} with {problem}", None, self._head(response))

    def _public(self, text: str) -> str:
        """A server's words fit for a reply: no key, no address (a proxy may name its
        upstream)."""
        host = urlsplit(self.base_url).hostname
        text = _ADDRESS.sub("[address]", _redact(text, self._api_key))
        return text.replace(host, "[address]") if host else text

    def _head(self, response: httpx.Response) -> str:
        """The body's first bytes, for the log."""
        return _redact(response.content[:_SNIPPET].decode("utf-8", "replace"), self._api_key)

    def _delay(self, attempt: int, failure: _Transient) -> float | None:
        """Seconds to wait before the next attempt, or None when waiting here is pointless."""
        if failure.retry_after_s is not None:
            if failure.retry_after_s > self._max_retry_after_s:
                return None
            return failure.retry_after_s
        ceiling = min(self._backoff_max_s, self._backoff_base_s * 2.0**attempt)
        # Equal jitter: never less than half the ceiling, so backoff still grows per attempt.
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class _Refused(Permanent):
    """A 400/422 that may name an optional field the server does not accept."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Transient:
    """A failed attempt that a later attempt may get past: ``reason`` is fit for people,
    ``logged`` (the body's first bytes, an exception's text) is for the log only."""

    reason: str
    retry_after_s: float | None
    logged: str = ""


class _Borrowed(httpx.AsyncBaseTransport):
    """Delegates requests to a caller-owned transport and leaves its lifecycle to the caller."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        return None


# --- request wire format -------------------------------------------------------------------


def request_body(
    model: str, request: ModelRequest, *, dropped: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The JSON body of a chat-completions call for ``request``, without the ``dropped``
    optional fields."""
    body: dict[str, Any] = {"model": model, "messages": list(_messages(request))}
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.tools:
        body["tools"] = [_function_tool(tool) for tool in request.tools]
        body["tool_choice"] = "auto"
        body["parallel_tool_calls"] = True
    for name in dropped:
        body.pop(name, None)
    return body


def _messages(request: ModelRequest) -> Iterator[dict[str, Any]]:
    if request.system:
        yield {"role": "system", "content": request.system}
    turn: list[AssistantText | ToolCallItem] = []
    for item in request.items:
        if isinstance(item, AssistantText | ToolCallItem):
            turn.append(item)
            continue
        if isinstance(item, Reasoning):
            # Chat-completions servers reject or ignore reasoning sent back as input.
            continue
        if turn:
            yield _assistant_message(turn)
            turn = []
        yield _input_message(item)
    if turn:
        yield _assistant_message(turn)


def _assistant_message(turn: list[AssistantText | ToolCallItem]) -> dict[str, Any]:
    texts = [item.text for item in turn if isinstance(item, AssistantText)]
    calls = [_wire_call(item) for item in turn if isinstance(item, ToolCallItem)]
    message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _wire_call(call: ToolCallItem) -> dict[str, Any]:
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _input_message(item: UserText | ToolResultItem) -> dict[str, Any]:
    match item:
        case UserText(text=text, images=()):
            return {"role": "user", "content": text}
        case UserText(text=text, images=images):
            parts = [{"type": "text", "text": text}, *(_image_part(i) for i in images)]
            return {"role": "user", "content": parts}
        case ToolResultItem(call_id=call_id, output=output, is_error=is_error):
            # The wire format has no error flag; the model still needs to know the call failed.
            content = f"[tool error] {output}" if is_error else output
            return {"role": "tool", "tool_call_id": call_id, "content": content}
        case _:
            assert_never(item)


def _image_part(image: ImagePart) -> dict[str, Any]:
    url = f"data:{image.media_type};base64,{image.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _function_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


# --- response wire format ------------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _ContentPart(_Wire):
    type: str = "text"
    text: str | None = None


class _WireFunction(_Wire):
    name: str
    arguments: str | dict[str, Any] | None = None


class _WireCall(_Wire):
    id: str | None = None
    function: _WireFunction


class _WireMessage(_Wire):
    content: str | list[_ContentPart] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_WireCall] | None = None


class _WireChoice(_Wire):
    message: _WireMessage


class _PromptDetails(_Wire):
    cached_tokens: int | None = None


class _WireUsage(_Wire):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None


class _WireCompletion(_Wire):
    choices: list[_WireChoice]
    usage: _WireUsage | None = None


def response_of(completion: _WireCompletion, *, turn: int) -> ModelResponse:
    """Items of the first choice: reasoning, then text, then tool calls (ids kept); and the
    usage the server reported."""
    message = completion.choices[0].message
    items: list[OutputItem] = []
    reasoning = message.reasoning_content or message.reasoning
    if reasoning:
        items.append(Reasoning(reasoning))
    text = _text_of(message.content)
    if text:
        items.append(AssistantText(text))
    for index, call in enumerate(message.tool_calls or ()):
        items.append(_tool_call(call, turn=turn, index=index))
    return ModelResponse(items=tuple(items), usage=_usage(completion.usage))


def _usage(wire: _WireUsage | None) -> Usage | None:
    if wire is None:
        return None
    details = wire.prompt_tokens_details
    cached = details.cached_tokens if details is not None else None
    return Usage(wire.prompt_tokens, wire.completion_tokens, cached or 0)


def read_completion(content: bytes) -> _WireCompletion | str:
    """The completion in a 2xx body, or what is wrong with the body, in words fit for people
    (a body that is not JSON is described, never quoted)."""
    try:
        payload = json.loads(content)
    except ValueError:
        return describe_body(content)
    if not isinstance(payload, dict) or not payload.get("choices"):
        return _payload_error(payload) or "no 'choices' in the body"
    try:
        return _WireCompletion.model_validate(payload)
    except ValidationError as e:
        return f"a malformed completion: {_validation_summary(e)}"


def _payload_error(payload: Any) -> str | None:
    """Some proxies answer 200 with an error object; surface it instead of a generic text."""
    if isinstance(payload, dict) and "error" in payload:
        return f"no 'choices', server error: {_error_text(payload)[:_SNIPPET]}"
    return None


def _validation_summary(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in detail['loc'])}: {detail['msg']}"
        for detail in error.errors()[:5]
    )


def _text_of(content: str | list[_ContentPart] | None) -> str:
    if isinstance(content, list):
        return "".join(part.text or "" for part in content if part.type == "text")
    return content or ""


def _tool_call(call: _WireCall, *, turn: int, index: int) -> ToolCallItem:
    # Some servers omit ids; a turn-derived id keeps the call addressable and stable.
    call_id = call.id or f"call_{turn}_{index}"
    arguments, problem = read_arguments(call.function.arguments)
    return ToolCallItem(call_id, call.function.name, arguments, problem)


# --- HTTP failure details ------------------------------------------------------------------


def server_message(response: httpx.Response) -> str:
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
    return _error_text(payload)[:_SNIPPET]


def describe_body(content: bytes) -> str:
    """What a body that is not JSON is, without its bytes: they may hold internal hosts."""
    head = content[:1024].lstrip().lower()
    if not head:
        return "an empty body"
    if head.startswith((b"<!doctype html", b"<html")) or b"<html" in head:
        return f"an HTML page instead of JSON ({len(content)} bytes)"
    return f"a body that is not JSON ({len(content)} bytes)"


def _error_text(payload: Any) -> str:
    if not isinstance(payload, dict):
        return json.dumps(payload)
    error = payload.get("error", payload)
    if isinstance(error, dict):
        found = error.get("message") or error.get("detail")
        return str(found) if found is not None else json.dumps(error)
    return str(error)


def retry_after(response: httpx.Response) -> float | None:
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


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text
