"""The chat-completions wire format in both directions, for the OpenAI-compatible provider.

The request body is built here rather than from the SDK's typed params so that an optional
field a server refuses can be left out of later requests, and the response is read with these
lenient models rather than the SDK's: servers that speak the API loosely (Ollama, vLLM,
LiteLLM) send ``reasoning_content``, argument objects instead of strings, or no call ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, assert_never

from pydantic import BaseModel, ConfigDict, ValidationError

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
from runtime.models.faults import SNIPPET, describe_body, error_text

OutputItem = AssistantText | Reasoning | ToolCallItem

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


class WireCompletion(_Wire):
    choices: list[_WireChoice]
    usage: _WireUsage | None = None


def response_of(completion: WireCompletion, *, turn: int) -> ModelResponse:
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


def read_completion(content: bytes) -> WireCompletion | str:
    """The completion in a 2xx body, or what is wrong with the body, in words fit for people
    (a body that is not JSON is described, never quoted)."""
    try:
        payload = json.loads(content)
    except ValueError:
        return describe_body(content)
    if not isinstance(payload, dict) or not payload.get("choices"):
        return _payload_error(payload) or "no 'choices' in the body"
    try:
        return WireCompletion.model_validate(payload)
    except ValidationError as e:
        return f"a malformed completion: {_validation_summary(e)}"


def _payload_error(payload: Any) -> str | None:
    """Some proxies answer 200 with an error object; surface it instead of a generic text."""
    if isinstance(payload, dict) and "error" in payload:
        return f"no 'choices', server error: {error_text(payload)[:SNIPPET]}"
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
