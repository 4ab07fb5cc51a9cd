"""How large a request is, in characters: the measure the context window is fitted with.

Tokens are estimated from characters with a per-task ratio that the provider's reported
``usage.prompt_tokens`` calibrates, so any provider's tokenizer is approximated without
shipping one. Images count a fixed amount: their base64 length says nothing of their tokens.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

from runtime.models.base import (
    AssistantText,
    ConversationItem,
    ModelRequest,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    ToolSpec,
    UserText,
)

IMAGE_CHARS = 3_000
# Role markers and message framing the wire adds to every item.
ITEM_OVERHEAD_CHARS = 16
# One encoder for every size: ``json.dumps`` with options builds a new one per call.
_JSON = json.JSONEncoder(ensure_ascii=False)


def item_chars(item: ConversationItem) -> int:
    match item:
        case UserText(text=text, images=images):
            return len(text) + IMAGE_CHARS * len(images) + ITEM_OVERHEAD_CHARS
        case AssistantText(text=text) | Reasoning(text=text):
            return len(text) + ITEM_OVERHEAD_CHARS
        case ToolCallItem(call_id=call_id, name=name, arguments=arguments):
            arguments_chars = len(_JSON.encode(arguments)) if arguments else 2
            return len(call_id) + len(name) + arguments_chars + ITEM_OVERHEAD_CHARS
        case ToolResultItem(call_id=call_id, output=output):
            return len(call_id) + len(output) + ITEM_OVERHEAD_CHARS


def tools_chars(tools: Iterable[ToolSpec]) -> int:
    return sum(
        len(t.name) + len(t.description) + len(json.dumps(t.parameters)) + ITEM_OVERHEAD_CHARS
        for t in tools
    )


def request_chars(request: ModelRequest) -> int:
    fixed = len(request.system) + tools_chars(request.tools)
    return fixed + sum(item_chars(item) for item in request.items)


def tokens_of(chars: int, chars_per_token: float) -> int:
    return math.ceil(chars / chars_per_token)
