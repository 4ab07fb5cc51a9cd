"""The Signal: one provider event in Keel's terms, and the text conventions (stop words,
links) that every adapter applies the same way.

Adapters build Signals with pure `signal_from_*` functions; nothing past the adapter sees a
provider payload. A payload that is acknowledged but never routed becomes `Ignored`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Literal, get_args

from routing.config import STOP_WORDS
from runtime.store.records import SignalActor
from runtime.threads import ThreadRef

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
    "duplicate",
    "self_generated",
    "unsupported",
    "unauthorised",
    "not_addressed",
    "edited",
    "capped",  # a linked pull request's CI follow-ups reached routing.max_ci_fixes
    "repo_refused",  # the request names a repository Keel does not reach
]

SIGNAL_KINDS: frozenset[str] = frozenset(get_args(SignalKind))
DROP_REASONS: frozenset[str] = frozenset(get_args(DropReason))

# Reaction names (Slack shortcodes) that mean "stop" as surely as the word does.
STOP_REACTIONS: frozenset[str] = frozenset({"octagonal_sign"})
# Check conclusions that ask for a fix.
FAILED_CONCLUSIONS: frozenset[str] = frozenset(
    {"failure", "timed_out", "startup_failure", "action_required"}
)

_COMMAND_WORDS: Mapping[str, Command] = MappingProxyType(
    {
        **dict.fromkeys(STOP_WORDS, "stop"),
        "🛑": "stop",
        ":octagonal_sign:": "stop",
        "status": "status",
    }
)
# Slack wraps links as <url> or <url|label>; markdown as (url). Neither delimiter is part of it.
_URL = re.compile(r"https?://[^\s<>|()\[\]\"']+")
_TRAILING = ".,;:!?"


# Who caused the event; ``permission`` is filled by enrichment when the provider has one.
# The same record is what the store keeps with the Signal, so nothing converts between them.
Actor = SignalActor


@dataclass(frozen=True, slots=True)
class CiRun:
    """A finished check run, check suite or workflow run."""

    name: str
    conclusion: str | None
    app_id: int | None = None  # the GitHub App that ran it: ours means we caused the event


@dataclass(frozen=True, slots=True)
class Signal:
    """A routable event.

    ``thread_ref`` names the conversation (a Slack thread by its root, a GitHub issue or pull
    request, or a commit for CI); ``objective_key`` is its text unless the adapter says
    otherwise; ``dedupe_key`` names the underlying fact, so two deliveries of one message
    collide. The fields after ``event_action`` are the provider facts routing reads: the
    GitHub event name, a pull request's or CI run's head branch, an issue's or pull request's
    labels, a CI run's outcome, and the name of a reaction. ``message`` names the message
    itself inside its thread (a Slack message's ts, a GitHub comment's id) and ``url`` is its
    link when the payload gives one: the worker reads both back to build the task brief, and
    the 👀 goes on that message.
    """

    provider: Provider
    delivery_id: str
    kind: SignalKind
    thread_ref: ThreadRef
    objective_key: str
    actor: Actor
    text: str
    addresses_bot: bool
    command: Command | None
    links: tuple[str, ...]
    received_at: datetime
    dedupe_key: str
    event_action: str | None
    event: str | None = None
    branch: str | None = None
    labels: tuple[str, ...] = ()
    ci: CiRun | None = None
    reaction: str | None = None
    message: ThreadRef | None = None
    url: str | None = None
    # The pull request a task opened, when this is its conversation or a check on its
    # current head: intake set ``objective_key`` to that task's objective.
    linked: ThreadRef | None = None

    @property
    def repo(self) -> str | None:
        """The repository the thread lives in; None for Slack (routing maps channels)."""
        return self.thread_ref.repo


@dataclass(frozen=True, slots=True)
class Ignored:
    """A payload that is acknowledged and dropped, with the reason recorded."""

    reason: DropReason
    detail: str


def parse_command(text: str) -> Command | None:
    """The command the whole text is, if it is one: `stop`, `Cancel!`, `status?`, `🛑`.

    Callers remove their own mention first. A sentence that merely contains a stop word is
    not a command: "stop using the cache" is a request.
    """
    word = text.strip().lower()
    return _COMMAND_WORDS.get(word) or _COMMAND_WORDS.get(word.rstrip(_TRAILING).strip())


def slack_message_fact(team: str, channel: str, ts: str) -> str:
    """The dedupe key of one Slack message, the same for every delivery of it; a reaction or
    click on the message is a separate fact under this key with its own suffix. Intake finds
    a message someone sent us under it (``runtime.store.signals.owner_of_message``)."""
    return f"slack:{team}:{channel}:{ts}"


def find_links(text: str) -> tuple[str, ...]:
    """URLs in the text, in order of first appearance, without trailing punctuation."""
    found = (match.rstrip(_TRAILING) for match in _URL.findall(text))
    return tuple(dict.fromkeys(found))
