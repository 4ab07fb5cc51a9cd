"""What a brief is made of: facts about the origin, the request, labelled sections of context
(a conversation, an issue body, a diff), the files attached there, and what could not be
fetched. Adapters fill a ``Gathered``; ``runtime.brief.render`` turns it into text."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runtime.threads import ThreadRef


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a task came from, as the stored Signal says, before anything is fetched.

    ``provider`` is None for a task no Signal started (delegated, or created by the API).
    """

    task_id: str
    text: str
    provider: str | None = None
    kind: str | None = None
    thread: ThreadRef | None = None
    message: ThreadRef | None = None  # the request itself inside the thread
    url: str | None = None  # the request's link, when the provider gave one
    repo: str | None = None
    actor_id: str | None = None
    actor_name: str | None = None


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file attached to a message: ``file_id`` is the provider's id, unique in the brief."""

    file_id: str
    name: str
    media_type: str
    size: int


@dataclass(frozen=True, slots=True)
class Post:
    """One message of a conversation (a Slack thread, an issue's comments, a review thread)."""

    author: str
    text: str
    at: datetime | None = None
    is_keel: bool = False
    is_request: bool = False
    files: tuple[FileRef, ...] = ()


@dataclass(frozen=True, slots=True)
class Section:
    """A labelled part of the brief: either ``posts`` (cut in the middle when too long) or
    ``text`` (cut after its first lines)."""

    title: str
    text: str = ""
    posts: tuple[Post, ...] = ()


@dataclass(frozen=True, slots=True)
class Download:
    """A file's content, or why there is none (too large, refused, not a text or image)."""

    file: FileRef
    content: bytes | None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Gathered:
    """What the adapters found. ``facts`` are labelled lines of the header, in order."""

    facts: tuple[tuple[str, str], ...] = ()
    request: str = ""
    sections: tuple[Section, ...] = ()
    downloads: tuple[Download, ...] = ()
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Sender:
    """Who wrote a follow-up, by display name, and its link if it has one."""

    name: str
    url: str | None = None
