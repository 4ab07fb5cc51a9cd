"""Domain records returned by the store. Nothing outside runtime/store sees an ORM row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from runtime.ids import MessageId, TaskId
from runtime.threads import ThreadRef


class TaskStatus(StrEnum):
    scheduled = "scheduled"
    queued = "queued"
    running = "running"
    waiting = "waiting"
    succeeded = "succeeded"
    failed = "failed"
    canceled = "canceled"
    timed_out = "timed_out"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset(
    {TaskStatus.succeeded, TaskStatus.failed, TaskStatus.canceled, TaskStatus.timed_out}
)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What ``schedule`` needs to create a Task."""

    agent: str
    message: str
    origin_thread_ref: ThreadRef | None = None
    objective_key: str | None = None
    repo: str | None = None
    parent_id: TaskId | None = None
    child_key: str | None = None
    deadline_at: datetime | None = None
    available_at: datetime | None = None
    requested_by: str | None = None
    follows_task_id: TaskId | None = None


@dataclass(frozen=True, slots=True)
class Task:
    task_id: TaskId
    root_id: TaskId
    parent_id: TaskId | None
    child_key: str | None
    depth: int
    agent: str
    status: TaskStatus
    message: str
    origin_thread_ref: ThreadRef | None
    objective_key: str | None
    repo: str | None
    follows_task_id: TaskId | None
    requested_by: str | None
    result: dict[str, Any] | None
    mailbox_seq: int
    cancel_requested_at: datetime | None
    deadline_at: datetime | None
    created_at: datetime
    status_changed_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What an executor reports; ``status`` must be terminal."""

    status: TaskStatus
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SignalActor:
    """Who caused a stored Signal, as routing's ``Actor`` told it: ``permission`` is theirs on
    the repository when enrichment read it. A Signal that no one caused (an event Keel
    ignores) has none, stored as ``{}``."""

    id: str
    name: str
    is_bot: bool
    is_self: bool
    permission: str | None = None

    def to_json(self) -> dict[str, str | bool | None]:
        """The stored form (``dataclasses.asdict`` costs more than the rest of the row)."""
        return {"id": self.id, "name": self.name, "is_bot": self.is_bot,
                "is_self": self.is_self, "permission": self.permission}

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> SignalActor | None:
        """The stored form read back; ``{}`` is no actor."""
        if not value:
            return None
        permission = value.get("permission")
        return cls(
            id=str(value.get("id", "")),
            name=str(value.get("name", "")),
            is_bot=bool(value.get("is_bot")),
            is_self=bool(value.get("is_self")),
            permission=None if permission is None else str(permission),
        )


def actor_json(actor: SignalActor | None) -> dict[str, str | bool | None]:
    return actor.to_json() if actor is not None else {}


@dataclass(frozen=True, slots=True)
class Lease:
    task_id: TaskId
    lease_id: str
    owner: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class TextPart:
    """What a follow-up says."""

    text: str

    def to_json(self) -> dict[str, str | None]:
        """The stored form, as intake writes it."""
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class SenderPart:
    """Who wrote a follow-up, and where: intake records it, the worker names the author
    from it. ``message`` is the text form of the message's thread reference."""

    provider: str | None = None
    sender_id: str | None = None
    name: str | None = None
    url: str | None = None
    message: str | None = None

    def to_json(self) -> dict[str, str | None]:
        """The stored form, as intake writes it."""
        return {
            "type": "sender", "provider": self.provider, "id": self.sender_id,
            "name": self.name, "url": self.url, "message": self.message,
        }


MailboxPart = TextPart | SenderPart


@dataclass(frozen=True, slots=True)
class MailboxMessage:
    message_id: MessageId
    task_id: TaskId
    seq: int
    idempotency_key: str
    parts: tuple[MailboxPart, ...]
    author: str | None
    created_at: datetime

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def sender(self) -> SenderPart | None:
        """Who wrote it, as intake recorded (None for messages from before it did)."""
        return next((p for p in self.parts if isinstance(p, SenderPart)), None)


@dataclass(frozen=True, slots=True)
class StopRequest:
    """The first stop asked of a task: when, why in the asker's words, and by whom."""

    at: datetime
    reason: str | None
    requested_by: str | None


@dataclass(frozen=True, slots=True)
class StatusChange:
    status: TaskStatus
    at: datetime
