"""Transcript items: deterministic keys, payload shapes, and the model's view of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.brief.model import Sender
from runtime.models.base import (
    AssistantText,
    ConversationItem,
    ImagePart,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    UserText,
)
from runtime.store.records import MailboxMessage
from runtime.store.transcripts import TranscriptEntry


def brief_key(task_id: str) -> str:
    """The task brief: the first user item, built once, never elided from the model's view."""
    return f"brief:{task_id}"


def mailbox_key(message_id: str) -> str:
    return f"mbx:{message_id}"


def call_key(call_id: str) -> str:
    return f"call:{call_id}"


def result_key(call_id: str) -> str:
    return f"result:{call_id}"


def model_key(turn: int, index: int) -> str:
    return f"model:{turn}:{index}"


def render_mailbox(template: str, message: MailboxMessage, sender: Sender) -> str:
    """The agent's versioned template; the raw text if rendering fails."""
    via = f"{sender.name} ({sender.url})" if sender.url else sender.name
    try:
        return template.format(
            text=message.text, sender=via, author=sender.name, url=sender.url or ""
        )
    except (KeyError, IndexError, ValueError):
        return message.text


def to_conversation(entries: Sequence[TranscriptEntry]) -> tuple[ConversationItem, ...]:
    return tuple(item for e in entries if (item := to_item(e.payload)) is not None)


def to_item(payload: dict[str, Any]) -> ConversationItem | None:
    match payload.get("type"):
        case "user_text":
            images = tuple(
                ImagePart(str(i["media_type"]), str(i["data"]), str(i.get("name", "")))
                for i in payload.get("images") or ()
            )
            return UserText(str(payload["text"]), images)
        case "assistant_text":
            return AssistantText(str(payload["text"]))
        case "reasoning":
            return Reasoning(str(payload["text"]))
        case "tool_call":
            return ToolCallItem(
                payload["call_id"],
                payload["name"],
                dict(payload["arguments"]),
                payload.get("arguments_error"),
            )
        case "tool_result":
            return ToolResultItem(
                payload["call_id"], str(payload["output"]), bool(payload.get("is_error"))
            )
    return None


def item_payload(item: AssistantText | Reasoning | ToolCallItem) -> tuple[str, str, dict[str, Any]]:
    """(role, kind, payload) for a model output item."""
    match item:
        case AssistantText(text=text):
            return "assistant", "message", {"type": "assistant_text", "text": text}
        case Reasoning(text=text):
            return "assistant", "reasoning", {"type": "reasoning", "text": text}
        case ToolCallItem(call_id=call_id, name=name, arguments=arguments):
            payload: dict[str, Any] = {"type": "tool_call", "call_id": call_id, "name": name}
            payload["arguments"] = arguments
            if item.arguments_error is not None:
                payload["arguments_error"] = item.arguments_error
            return "assistant", "tool_call", payload


def final_text(entries: Sequence[TranscriptEntry], turn: int) -> str:
    prefix = f"model:{turn}:"
    texts = [
        str(e.payload["text"])
        for e in entries
        if e.item_key.startswith(prefix) and e.payload.get("type") == "assistant_text"
    ]
    return "\n".join(texts)
