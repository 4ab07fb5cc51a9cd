"""The ModelProvider port and the conversation items it reads and returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image shown to a model that reads images: base64 ``data`` of ``media_type``."""

    media_type: str
    data: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class UserText:
    text: str
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True, slots=True)
class AssistantText:
    text: str


@dataclass(frozen=True, slots=True)
class Reasoning:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallItem:
    """A call the model asked for. ``arguments_error`` says why its arguments could not be
    read (not JSON, not an object); such a call is answered with that error, never run."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    arguments_error: str | None = None


def read_arguments(raw: str | dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """A model's tool arguments as an object, or ``({}, why not)``: a model's mistake is
    answered to the model, so it is data here, not an exception."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or not raw.strip():
        return {}, None
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        return {}, f"the arguments are not valid JSON ({e}): {raw[:300]!r}"
    if not isinstance(parsed, dict):
        return {}, f"the arguments are not a JSON object: {raw[:300]!r}"
    return parsed, None


@dataclass(frozen=True, slots=True)
class ToolResultItem:
    call_id: str
    output: str
    is_error: bool = False


ConversationItem = UserText | AssistantText | Reasoning | ToolCallItem | ToolResultItem


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


# turn: the agent's next step; compaction: a summary of the work so far, asked for when the
# conversation no longer fits the context window.
Purpose = Literal["turn", "compaction"]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call. ``turn`` counts from 0 and is stable across recovery of the same run.
    ``max_tokens`` bounds the reply; None leaves it to the provider."""

    task_id: str
    turn: int
    system: str
    items: tuple[ConversationItem, ...]
    tools: tuple[ToolSpec, ...] = ()
    purpose: Purpose = "turn"
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens the provider says a call used; ``cached_tokens`` is the part of the prompt it
    served from its cache (0 when not reported)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """Items the model returned, in order: text, reasoning and tool calls."""

    items: tuple[AssistantText | Reasoning | ToolCallItem, ...] = field(default_factory=tuple)
    usage: Usage | None = None

    @property
    def tool_calls(self) -> tuple[ToolCallItem, ...]:
        return tuple(i for i in self.items if isinstance(i, ToolCallItem))


class ModelProvider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Raise ``runtime.errors.Retryable`` for transient failures, ``Permanent`` otherwise."""
        ...
