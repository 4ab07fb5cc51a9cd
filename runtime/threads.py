"""Thread references: where a conversation lives, as one type from the adapters to the outbox.

Stored and logged as text (``str(ref)``), parsed back only here:

- ``slack:{team}/{channel}/{thread_ts}``, with ``:{ts}`` for one message in the thread;
- ``github:{owner}/{repo}#{number}``, with ``:{comment_id}`` for one comment;
- ``github:{owner}/{repo}@{sha}`` for a commit (CI results).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from runtime.errors import Permanent

Surface = Literal["slack", "github"]

_SLACK = re.compile(
    r"^slack:(?P<team>[^\s/:]+)/(?P<channel>[^\s/:]+)/(?P<thread_ts>\d+\.\d+)(?::(?P<ts>\d+\.\d+))?$"
)
_ISSUE = re.compile(r"^github:(?P<repo>[\w.-]+/[\w.-]+)#(?P<number>\d+)(?::(?P<comment>\d+))?$")
_COMMIT = re.compile(r"^github:(?P<repo>[\w.-]+/[\w.-]+)@(?P<sha>[0-9a-fA-F]{4,64})$")


@dataclass(frozen=True, slots=True)
class SlackThread:
    team: str
    channel: str
    thread_ts: str
    message_ts: str | None = None

    @property
    def surface(self) -> Surface:
        return "slack"

    @property
    def repo(self) -> None:
        return None

    @property
    def root(self) -> SlackThread:
        return replace(self, message_ts=None)

    def __str__(self) -> str:
        suffix = f":{self.message_ts}" if self.message_ts is not None else ""
        return f"slack:{self.team}/{self.channel}/{self.thread_ts}{suffix}"


@dataclass(frozen=True, slots=True)
class GitHubIssue:
    """An issue or pull request conversation (they share numbers)."""

    repo: str
    number: int
    comment_id: int | None = None

    @property
    def surface(self) -> Surface:
        return "github"

    @property
    def root(self) -> GitHubIssue:
        return replace(self, comment_id=None)

    def __str__(self) -> str:
        suffix = f":{self.comment_id}" if self.comment_id is not None else ""
        return f"github:{self.repo}#{self.number}{suffix}"


@dataclass(frozen=True, slots=True)
class GitHubCommit:
    repo: str
    sha: str

    @property
    def surface(self) -> Surface:
        return "github"

    @property
    def root(self) -> GitHubCommit:
        return self

    def __str__(self) -> str:
        return f"github:{self.repo}@{self.sha}"


ThreadRef = SlackThread | GitHubIssue | GitHubCommit


def parse_thread(text: str) -> ThreadRef:
    """The reference ``text`` names; a clear error for anything else."""
    if found := _SLACK.match(text):
        return SlackThread(found["team"], found["channel"], found["thread_ts"], found["ts"])
    if found := _ISSUE.match(text):
        comment = found["comment"]
        return GitHubIssue(found["repo"], int(found["number"]), int(comment) if comment else None)
    if found := _COMMIT.match(text):
        return GitHubCommit(found["repo"], found["sha"])
    raise Permanent(f"not a thread reference: {text!r}")


def slack_thread(text: str) -> SlackThread:
    ref = parse_thread(text)
    if not isinstance(ref, SlackThread):
        raise Permanent(f"not a Slack thread: {text!r}")
    return ref


def github_issue(text: str) -> GitHubIssue:
    ref = parse_thread(text)
    if not isinstance(ref, GitHubIssue):
        raise Permanent(f"not a GitHub issue thread: {text!r}")
    return ref
