"""Thread references: where a conversation lives, as one type from the adapters to the outbox.

Stored and logged as text (``str(ref)``), parsed back only here:

- ``slack:{team}/{channel}/{thread_ts}``, with ``:{ts}`` for one message in the thread;
- ``github:{owner}/{repo}#{number}``, with ``:{comment_id}`` for one comment;
- ``github:{owner}/{repo}@{sha}`` for a commit (CI results);
- ``local:{session}``, with ``:{message}`` for one message, for a conversation only this
  machine shows: ``keel run``'s terminal. No provider has it, so nothing is fetched for it
  and no Signal comes from it.

Where a post landed (``Landed``) is one of these naming the message itself, prefixed
``fallback:`` when the origin refused it and it went to the configured fallback.

A fallback may also be a Slack channel (``SlackChannel``: ``C0123…``, ``#name`` or
``slack:{team}/{channel}``), where each task's first post starts a thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from runtime.errors import Permanent

SurfaceName = Literal["slack", "github", "local"]

# One pattern per component, shared by the constructors and the parser, so every value that
# can be built can be written down and read back unchanged.
_SLACK_ID = r"[^\s/:]+"
_SLACK_TS = r"\d+\.\d+"
_REPO = r"[\w.-]+/[\w.-]+"
_NUMBER = r"[1-9]\d*"
_SHA = r"[0-9a-fA-F]{4,64}"
# A channel id (C…, or G… for an older private channel) or a channel's #name.
_CHANNEL = r"[CG][A-Z0-9]{2,}|#[a-z0-9][a-z0-9_-]{0,79}"
_LOCAL_ID = r"[\w.-]+"
# Each component's own check, compiled once: every webhook and every outbox row builds refs.
_PARTS = {
    part: re.compile(part)
    for part in (_SLACK_ID, _SLACK_TS, _REPO, _NUMBER, _SHA, _CHANNEL, _LOCAL_ID)
}

_SLACK = re.compile(
    rf"slack:(?P<team>{_SLACK_ID})/(?P<channel>{_SLACK_ID})/(?P<thread_ts>{_SLACK_TS})"
    rf"(?::(?P<ts>{_SLACK_TS}))?"
)
_ISSUE = re.compile(rf"github:(?P<repo>{_REPO})#(?P<number>{_NUMBER})(?::(?P<comment>{_NUMBER}))?")
_COMMIT = re.compile(rf"github:(?P<repo>{_REPO})@(?P<sha>{_SHA})")
_LOCAL = re.compile(rf"local:(?P<session>{_LOCAL_ID})(?::(?P<message>{_LOCAL_ID}))?")
_FALLBACK = "fallback:"


class BadThreadRef(Permanent):
    """Text, or parts, that do not make a thread reference; the message shows the forms."""


@dataclass(frozen=True, slots=True)
class SlackThread:
    """A Slack thread, by its root message; ``message_ts`` names one message inside it."""

    team: str
    channel: str
    thread_ts: str
    message_ts: str | None = None

    def __post_init__(self) -> None:
        _check("Slack team", self.team, _SLACK_ID)
        _check("Slack channel", self.channel, _SLACK_ID)
        _check("Slack thread ts", self.thread_ts, _SLACK_TS)
        if self.message_ts is not None:
            _check("Slack message ts", self.message_ts, _SLACK_TS)

    @property
    def surface(self) -> SurfaceName:
        return "slack"

    @property
    def repo(self) -> None:
        """A Slack thread names no repository: routing maps its channel to one."""
        return None

    @property
    def root(self) -> SlackThread:
        return self if self.message_ts is None else SlackThread(
            self.team, self.channel, self.thread_ts
        )

    @property
    def target_ts(self) -> str:
        """The message a reaction or an edit is about: the named one, else the root."""
        return self.message_ts or self.thread_ts

    def message(self, ts: str) -> SlackThread:
        """The message ``ts`` posted in this thread."""
        return SlackThread(self.team, self.channel, self.thread_ts, ts)

    def __str__(self) -> str:
        suffix = f":{self.message_ts}" if self.message_ts is not None else ""
        return f"slack:{self.team}/{self.channel}/{self.thread_ts}{suffix}"


@dataclass(frozen=True, slots=True)
class GitHubIssue:
    """An issue or pull request conversation (they share numbers); ``comment_id`` names one
    comment in it."""

    repo: str
    number: int
    comment_id: int | None = None

    def __post_init__(self) -> None:
        _check("GitHub repository", self.repo, _REPO)
        _check("issue number", str(self.number), _NUMBER)
        if self.comment_id is not None:
            _check("comment id", str(self.comment_id), _NUMBER)

    @property
    def surface(self) -> SurfaceName:
        return "github"

    @property
    def root(self) -> GitHubIssue:
        return self if self.comment_id is None else GitHubIssue(self.repo, self.number)

    def comment(self, comment_id: int) -> GitHubIssue:
        return GitHubIssue(self.repo, self.number, comment_id)

    def __str__(self) -> str:
        suffix = f":{self.comment_id}" if self.comment_id is not None else ""
        return f"github:{self.repo}#{self.number}{suffix}"


@dataclass(frozen=True, slots=True)
class GitHubCommit:
    """A commit, where CI results are reported; nobody can reply to it."""

    repo: str
    sha: str

    def __post_init__(self) -> None:
        _check("GitHub repository", self.repo, _REPO)
        _check("commit sha", self.sha, _SHA)

    @property
    def surface(self) -> SurfaceName:
        return "github"

    @property
    def root(self) -> GitHubCommit:
        return self

    def __str__(self) -> str:
        return f"github:{self.repo}@{self.sha}"


@dataclass(frozen=True, slots=True)
class LocalThread:
    """A conversation only this machine shows (``keel run``'s terminal), by its session;
    ``message`` names one message in it."""

    session: str
    message: str | None = None

    def __post_init__(self) -> None:
        _check("local session", self.session, _LOCAL_ID)
        if self.message is not None:
            _check("local message", self.message, _LOCAL_ID)

    @property
    def surface(self) -> SurfaceName:
        return "local"

    @property
    def repo(self) -> None:
        """A local conversation names no repository: the task says which it is about."""
        return None

    @property
    def root(self) -> LocalThread:
        return self if self.message is None else LocalThread(self.session)

    def __str__(self) -> str:
        suffix = f":{self.message}" if self.message is not None else ""
        return f"local:{self.session}{suffix}"


ThreadRef = SlackThread | GitHubIssue | GitHubCommit | LocalThread


@dataclass(frozen=True, slots=True)
class SlackChannel:
    """A Slack channel to start threads in, by id or ``#name`` (which Slack resolves when
    posting); ``team`` None is the workspace of Keel's single bot token."""

    channel: str
    team: str | None = None

    def __post_init__(self) -> None:
        _check("Slack channel", self.channel, _CHANNEL)
        if self.team is not None:
            _check("Slack team", self.team, _SLACK_ID)

    @property
    def surface(self) -> SurfaceName:
        return "slack"

    def holds(self, thread: SlackThread) -> bool:
        """Whether ``thread`` is in this channel, as far as an id tells (a #name does not)."""
        named = self.channel.startswith("#")
        return (named or thread.channel == self.channel) and self.team in (None, thread.team)

    def __str__(self) -> str:
        return f"slack:{self.team}/{self.channel}" if self.team else self.channel


# Where replies go when their own thread refuses them.
Fallback = ThreadRef | SlackChannel

_FORMS = (
    "slack:<team>/<channel>/<thread ts>[:<ts>], github:<owner>/<repo>#<number>[:<comment id>], "
    "github:<owner>/<repo>@<sha> or local:<session>[:<message>]"
)


@dataclass(frozen=True, slots=True)
class Landed:
    """Where a post landed: the message itself, and whether that is in the fallback thread."""

    message: ThreadRef
    fallback: bool = False

    def __str__(self) -> str:
        return f"{_FALLBACK}{self.message}" if self.fallback else str(self.message)


def parse_thread(text: str) -> ThreadRef:
    """The reference ``text`` names; ``BadThreadRef`` for anything else."""
    if found := _SLACK.fullmatch(text):
        return SlackThread(found["team"], found["channel"], found["thread_ts"], found["ts"])
    if found := _ISSUE.fullmatch(text):
        comment = found["comment"]
        return GitHubIssue(found["repo"], int(found["number"]), int(comment) if comment else None)
    if found := _COMMIT.fullmatch(text):
        return GitHubCommit(found["repo"], found["sha"])
    if found := _LOCAL.fullmatch(text):
        return LocalThread(found["session"], found["message"])
    raise BadThreadRef(f"not a thread reference: {text!r}; expected {_FORMS}")


def parse_channel(text: str) -> SlackChannel:
    """``C0123…``, ``#name`` or ``slack:{team}/{channel}``; ``BadThreadRef`` for anything else."""
    team, slash, channel = text.removeprefix("slack:").rpartition("/")
    if slash and not text.startswith("slack:"):
        raise BadThreadRef(f"not a Slack channel: {text!r}")
    return SlackChannel(channel, team if slash else None)


def thread_of(text: str | None) -> ThreadRef | None:
    """A stored column that may be empty, read back."""
    return parse_thread(text) if text is not None else None


def text_of(ref: ThreadRef | None) -> str | None:
    """What a column that may be empty stores."""
    return str(ref) if ref is not None else None


def parse_landed(text: str) -> Landed:
    fallback = text.startswith(_FALLBACK)
    return Landed(parse_thread(text.removeprefix(_FALLBACK)), fallback=fallback)


def _check(what: str, value: str, pattern: str) -> None:
    if _PARTS[pattern].fullmatch(value) is None:
        raise BadThreadRef(f"{what} {value!r} cannot be part of a thread reference")
