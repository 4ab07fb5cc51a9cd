"""Anthropic's Messages API as a ``ModelProvider``, on the official ``anthropic`` SDK.

The SDK owns the HTTP (``AsyncAnthropic(base_url, api_key, timeout)``, the ``x-api-key`` and
``anthropic-version`` headers) and its typed errors, mapped here to Keel's like the OpenAI
provider's: ``RateLimitError`` (429, ``Retry-After`` honoured), ``InternalServerError`` (5xx,
529 overloaded) and connection errors are retried by Keel's ``Retries`` (the SDK's are off,
``max_retries=0``; see ``runtime.models.faults``); a 401/403 is ``Permanent``; the 400 that
says ``prompt is too long`` is ``ContextLengthExceeded``.

Translation: the system prompt is the top-level ``system`` field; Keel's tool calls are
``tool_use`` blocks of the assistant's message and their results ``tool_result`` blocks of
the next user message (consecutive items of one role are one message: the API alternates
roles). Reasoning is not sent back: a ``thinking`` block needs the signature Keel does not keep.
Usage: Anthropic's ``input_tokens`` leaves out cache reads and writes; Keel's prompt tokens are
all three, with the cache reads as ``cached_tokens``.
"""

from __future__ import annotations

import asyncio
import json
from functools import partial
from typing import Any

import anthropic
import httpx2
from pydantic import BaseModel, ConfigDict, ValidationError

from runtime.errors import Permanent
from runtime.models.base import (
    AssistantText,
    ConversationItem,
    ModelRequest,
    ModelResponse,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    Usage,
    UserText,
    read_arguments,
)
from runtime.models.faults import (
    Retries,
    Sleep,
    Transient,
    Wording,
    answered,
    connection_failure,
    describe_body,
    error_text,
    sdk_options,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
OutputItem = AssistantText | Reasoning | ToolCallItem


class AnthropicProvider:
    """A ``ModelProvider`` for Anthropic's Messages API (``POST {base_url}/v1/messages``).

    ``max_tokens`` bounds a reply when the request does not (the API requires a bound)."""

    __slots__ = (
        "_api_key",
        "_max_tokens",
        "_retries",
        "_timeout_s",
        "_transport",
        "_wording",
        "base_url",
        "model",
    )

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        max_tokens: int = 4096,
        transport: httpx2.AsyncBaseTransport | None = None,
        *,
        sleep: Sleep | None = None,
        backoff_base_s: float = 0.5,
        max_retry_after_s: float = 60.0,
    ) -> None:
        if not api_key:
            raise Permanent("the anthropic provider needs an API key (model.api_key)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._max_tokens = max_tokens
        self._transport = transport
        self._retries = Retries(
            max_retries,
            sleep or asyncio.sleep,
            backoff_base_s=backoff_base_s,
            max_retry_after_s=max_retry_after_s,
        )
        self._wording = Wording(self.base_url, api_key)

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={self.base_url!r}, model={self.model!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = request_body(self.model, request, default_max_tokens=self._max_tokens)
        async with self._client() as client:
            message = await self._retries.run(
                f"{self.base_url}/v1/messages", partial(self._attempt, client, body)
            )
        return response_of(message)

    def _client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=self._api_key, **sdk_options(self.base_url, self._timeout_s, self._transport)
        )

    async def _attempt(
        self, client: anthropic.AsyncAnthropic, body: dict[str, Any]
    ) -> _WireMessage | Transient:
        try:
            raw = await client.messages.with_raw_response.create(**body)
        except (anthropic.APIConnectionError, httpx2.InvalidURL) as e:  # timeouts included
            return connection_failure(e, self._wording)
        except anthropic.APIStatusError as e:
            transient = isinstance(e, anthropic.RateLimitError | anthropic.InternalServerError)
            outcome = answered(
                e.status_code, e.response, self._wording, self.model, transient=transient
            )
            if isinstance(outcome, Transient):
                return outcome
            raise outcome from e
        found = read_message(raw.http_response.content)
        if isinstance(found, _WireMessage):
            return found
        status = raw.http_response.status_code
        return Transient(
            f"HTTP {status} with {self._wording.public(found)}",
            None,
            self._wording.head(raw.http_response),
        )


# --- request ---------------------------------------------------------------------------------


def request_body(model: str, request: ModelRequest, *, default_max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens or default_max_tokens,
        "messages": _messages(request.items),
    }
    if request.system:
        body["system"] = request.system
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    return body


def _messages(items: tuple[ConversationItem, ...]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in items:
        block = _block(item)
        if block is None:
            continue
        role = "assistant" if isinstance(item, AssistantText | ToolCallItem) else "user"
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(block)
        else:
            messages.append({"role": role, "content": block})
    return messages


def _block(item: ConversationItem) -> list[dict[str, Any]] | None:
    match item:
        case UserText(text=text, images=images):
            images_ = [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": i.media_type, "data": i.data},
                }
                for i in images
            ]
            return [*images_, {"type": "text", "text": text}] if text else images_ or None
        case AssistantText(text=text):
            return [{"type": "text", "text": text}] if text else None
        case Reasoning():
            return None
        case ToolCallItem(call_id=call_id, name=name, arguments=arguments):
            return [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}]
        case ToolResultItem(call_id=call_id, output=output, is_error=is_error):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
            result["content"] = output
            if is_error:
                result["is_error"] = True
            return [result]


# --- response --------------------------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _WireBlock(_Wire):
    type: str
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None


class _WireUsage(_Wire):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class _WireMessage(_Wire):
    content: list[_WireBlock]
    usage: _WireUsage | None = None


def read_message(content: bytes) -> _WireMessage | str:
    """The message in a 2xx body, or what is wrong with the body, in words fit for people."""
    try:
        payload = json.loads(content)
    except ValueError:
        return describe_body(content)
    if not isinstance(payload, dict) or payload.get("type") == "error":
        return f"no message, server error: {error_text(payload)}"
    try:
        return _WireMessage.model_validate(payload)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"a malformed message: {where}: {first['msg']}"


def response_of(message: _WireMessage) -> ModelResponse:
    items: list[OutputItem] = []
    for index, block in enumerate(message.content):
        if block.type == "thinking" and block.thinking:
            items.append(Reasoning(block.thinking))
        elif block.type == "text" and block.text:
            items.append(AssistantText(block.text))
        elif block.type == "tool_use" and block.name:
            call_id = block.id or f"toolu_{index}"
            raw = block.input if isinstance(block.input, dict | None) else json.dumps(block.input)
            arguments, problem = read_arguments(raw)
            items.append(ToolCallItem(call_id, block.name, arguments, problem))
    return ModelResponse(items=tuple(items), usage=_usage(message.usage))


def _usage(wire: _WireUsage | None) -> Usage | None:
    if wire is None:
        return None
    cached = wire.cache_read_input_tokens or 0
    prompt = wire.input_tokens + cached + (wire.cache_creation_input_tokens or 0)
    return Usage(prompt, wire.output_tokens, cached)
