"""The Surface port: where replies go. Implemented by the Slack and GitHub adapters.

Bodies are Markdown (Keel's reply model, rendered by ``runtime/reporting.py``); each surface
renders them for its own medium at the wire, so model text cannot smuggle in that medium's
control sequences (pings, links) whatever path it took to the thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

ActionStyle = Literal["primary", "danger"]


@dataclass(frozen=True, slots=True)
class PostedRef:
    """Where a post landed: Slack ``team/channel:ts``, GitHub ``owner/repo#12:comment_id``."""

    surface: str
    ref: str


@dataclass(frozen=True, slots=True)
class Action:
    """A button offered with a post. A click comes back to Keel as a Signal of kind
    ``action`` carrying ``name`` and ``value``; a surface without buttons leaves it out."""

    name: str  # what the click asks for, e.g. "stop"
    label: str
    value: str  # e.g. the task id
    style: ActionStyle | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Action:
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
        self, thread_ref: str, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> PostedRef:
        """Post once into the thread. ``key`` is carried in hidden metadata for reconcile."""
        ...

    async def find_post(self, thread_ref: str, *, key: str) -> PostedRef | None:
        """Reconcile: the post carrying ``key``, if one landed."""
        ...

    async def update(
        self, posted: PostedRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None: ...

    async def react(self, thread_ref: str, emoji: str) -> None: ...
