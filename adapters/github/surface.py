"""GitHubSurface: replies on issues and pull requests, found again by a hidden marker.

Every post ends with ``<!-- keel:{key} -->``; reconciling a post whose response was lost is
a search of the issue's comments for that marker, so a retry never comments twice.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from urllib.parse import quote

from adapters.github.client import GitHubClient
from adapters.github.markdown import to_github
from runtime.errors import Permanent
from runtime.surfaces import Action
from runtime.threads import GitHubIssue, ThreadRef

# GitHub refuses comment bodies over 65,536 characters.
BODY_LIMIT = 65_536
_TRUNCATED = "\n\n… (truncated)"
# Slack shortcodes Keel uses, in GitHub's reaction vocabulary.
_REACTIONS = {
    "eyes": "eyes",
    "+1": "+1",
    "thumbsup": "+1",
    "white_check_mark": "+1",
    "-1": "-1",
    "x": "confused",
    "confused": "confused",
    "heart": "heart",
    "hooray": "hooray",
    "tada": "hooray",
    "rocket": "rocket",
    "laugh": "laugh",
}


def marker(key: str) -> str:
    """The hidden HTML comment that names a post; ``--`` cannot end the comment early."""
    safe = quote(key, safe=":/._@#=+").replace("--", "-%2D")
    return f"<!-- keel:{safe} -->"


def with_marker(text: str, key: str) -> str:
    return _with_tail(text, marker(key))


def _with_tail(text: str, hidden: str) -> str:
    tail = f"\n\n{hidden}" if hidden else ""
    room = BODY_LIMIT - len(tail)
    if len(text) > room:
        text = text[: room - len(_TRUNCATED)] + _TRUNCATED
    return text + tail


class GitHubSurface:
    name = "github"

    def __init__(self, client: GitHubClient, *, allowed_mentions: Collection[str] = ()) -> None:
        self.client = client
        self.allowed_mentions = frozenset(allowed_mentions)

    async def post(
        self, thread: ThreadRef, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> GitHubIssue:
        # No buttons on GitHub: people stop a task by commenting "stop".
        issue = _issue(thread).root
        body = with_marker(to_github(text, self.allowed_mentions), key)
        comment = await self.client.create_comment(issue.repo, issue.number, body)
        return issue.comment(comment.comment_id)

    async def find_post(self, thread: ThreadRef, *, key: str) -> GitHubIssue | None:
        issue = _issue(thread).root
        wanted = marker(key)
        for comment in await self.client.list_comments(issue.repo, issue.number):
            if comment.body.rstrip().endswith(wanted):
                return issue.comment(comment.comment_id)
        return None

    async def update(
        self, posted: ThreadRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
        ref = _issue(posted)
        if ref.comment_id is None:
            raise Permanent(f"not a GitHub comment: {ref}")
        # Keep the marker: find_post must still recognise the post after an edit.
        comments = await self.client.list_comments(ref.repo, ref.number)
        current = next((c for c in comments if c.comment_id == ref.comment_id), None)
        shown = to_github(text, self.allowed_mentions)
        body = _rekeyed(current.body if current else "", shown)
        await self.client.edit_comment(ref.repo, ref.number, ref.comment_id, body)

    async def react(self, target: ThreadRef, emoji: str) -> None:
        content = _REACTIONS.get(emoji.strip(":"))
        if content is None:
            raise Permanent(f"GitHub has no reaction for {emoji!r}")
        await self.client.react(_issue(target), content)


def _issue(ref: ThreadRef) -> GitHubIssue:
    # A commit (CI results) has no conversation to post in: the fallback takes such replies.
    if not isinstance(ref, GitHubIssue):
        raise Permanent(f"not a GitHub issue or pull request thread: {ref}")
    return ref


def _rekeyed(old_body: str, text: str) -> str:
    start = old_body.rfind("<!-- keel:")
    return _with_tail(text, old_body[start:].strip() if start >= 0 else "")
