"""The Signal: one provider event in Keel's terms, and the text conventions (stop words,
links) that every adapter applies the same way.

Adapters build Signals with pure `signal_from_*` functions; nothing past the adapter sees a
provider payload. A payload that is acknowledged but never routed becomes `Ignored`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, get_args

Provider = Literal["slack", "github"]
SignalKind = Literal[
    "mention",
    "thread_reply",
    "message",
    "issue_comment",
    "review_comment",
    "issue_opened",
    "pr_opened",
    "ci_result",
    "reaction",
    "action",  # a click on one of Keel's buttons (e.g. Stop)
    "edit",
    "other",
]
Command = Literal["stop", "status"]
DropReason = Literal[
    "duplicate", "self_generated", "unsupported", "unauthorised", "not_addressed", "edited"
]

SIGNAL_KINDS: frozenset[str] = frozenset(get_args(SignalKind))
DROP_REASONS: frozenset[str] = frozenset(get_args(DropReason))

# Reaction names (Slack shortcodes) that mean "stop" as surely as the word does.
STOP_REACTIONS: frozenset[str] = frozenset({"octagonal_sign"})

_COMMAND_WORDS: Mapping[str, Command] = MappingProxyType(
    {"stop": "stop", "cancel": "stop", "🛑": "stop", ":octagonal_sign:": "stop", "status": "status"}
)
# Slack wraps links as <url> or <url|label>; markdown as (url). Neither delimiter is part of it.
_URL = re.compile(r"https?://[^\s<>|()\[\]\"']+")
_TRAILING = ".,;:!?"
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Actor:
    """Who caused the event. `permission` is filled by enrichment when the provider has one."""

    id: str
    name: str
    is_bot: bool
    is_self: bool
    permission: str | None = None


@dataclass(frozen=True, slots=True)
class Signal:
    """A routable event.

    `thread_ref` names the conversation (`slack:{team}/{channel}/{root_ts}`, with `:{ts}`
    when the message is a reply inside it, so the 👀 lands on that message;
    `github:{owner}/{repo}#{number}`, `github:{owner}/{repo}@{head_sha}` for CI);
    `dedupe_key` names the underlying fact, so two deliveries of one message collide.
    """

    provider: Provider
    delivery_id: str
    kind: SignalKind
    thread_ref: str
    objective_key: str
    actor: Actor
    text: str
    addresses_bot: bool
    command: Command | None
    links: tuple[str, ...]
    received_at: datetime
    dedupe_key: str
    repo: str | None
    event_action: str | None
    detail: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Ignored:
    """A payload that is acknowledged and dropped, with the reason recorded."""

    reason: DropReason
    detail: str


_SLACK_MESSAGE = re.compile(r":\d+\.\d+$")


def thread_root(thread_ref: str) -> str:
    """The conversation itself: a Slack ``:ts`` or GitHub comment ref points inside it."""
    if thread_ref.startswith("github:"):
        return thread_ref.split(":comment", 1)[0]
    if thread_ref.startswith("slack:"):
        return _SLACK_MESSAGE.sub("", thread_ref)
    return thread_ref


def parse_command(text: str) -> Command | None:
    """The command the whole text is, if it is one: `stop`, `Cancel!`, `status?`, `🛑`.

    Callers remove their own mention first. A sentence that merely contains a stop word is
    not a command: "stop using the cache" is a request.
    """
    word = text.strip().lower()
    return _COMMAND_WORDS.get(word) or _COMMAND_WORDS.get(word.rstrip(_TRAILING).strip())


def find_links(text: str) -> tuple[str, ...]:
    """URLs in the text, in order of first appearance, without trailing punctuation."""
    found = (match.rstrip(_TRAILING) for match in _URL.findall(text))
    return tuple(dict.fromkeys(found))


def frozen_detail(**values: Any) -> Mapping[str, Any]:
    """A read-only detail mapping, so a frozen Signal cannot be changed through it."""
    return MappingProxyType(values)
