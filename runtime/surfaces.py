"""The Surface port: where replies go. Implemented by the Slack and GitHub adapters, and by
the terminal for ``keel run``'s local thread.

A thread is named by a ``ThreadRef``; a post is named by the reference to the message
itself (a Slack thread with its ``message_ts``, a GitHub issue with its ``comment_id``, a
local thread with its ``message``).
Bodies are Markdown (Keel's reply model, ``runtime/reply.py``); each surface renders them for
its own medium at the wire, so model text cannot smuggle in that medium's control sequences
(pings, links) whatever path it took to the thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from runtime.threads import SlackChannel, ThreadRef

ActionStyle = Literal["primary", "danger"]


@dataclass(frozen=True, slots=True)
class Action:
    """A button offered with a post. A click comes back to Keel as a Signal of kind
    ``action`` carrying ``name`` and ``value``; a surface without buttons leaves it out."""

    name: str  # what the click asks for, e.g. "stop"
    label: str
    value: str  # e.g. the task id
    style: ActionStyle | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "label": self.label, "value": self.value, "style": self.style}

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> Action:
        style = value.get("style")
        return cls(
            name=str(value["name"]),
            label=str(value["label"]),
            value=str(value["value"]),
            style="primary" if style == "primary" else "danger" if style == "danger" else None,
        )


class Surface(Protocol):
    name: str

    async def post(
        self, thread: ThreadRef, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> ThreadRef:
        """Post once into the thread; the answer names the message that landed. ``key`` is
        carried in hidden metadata for reconcile."""
        ...

    async def find_post(self, thread: ThreadRef, *, key: str) -> ThreadRef | None:
        """Reconcile: the message carrying ``key``, if one landed."""
        ...

    async def update(
        self, posted: ThreadRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
        """New text (and buttons: none removes them) for a message ``post`` named."""
        ...

    async def react(self, target: ThreadRef, emoji: str) -> None:
        """React to the message ``target`` names, or to the thread's root message."""
        ...


@runtime_checkable
class ChannelSurface(Protocol):
    """A surface that can start a thread in a channel (Slack): for a fallback channel."""

    async def start_thread(self, channel: SlackChannel, text: str, *, key: str) -> ThreadRef:
        """Post ``text`` as a new top-level message; the answer names it (and so its thread)."""
        ...
