"""The GitHub side of a task brief: the issue or pull request a request was made on.

For an issue: title, body, labels, state and its comments up to and including the request.
For a pull request also: head and base, the head SHA, the latest check runs on it, the
changed files with their +/- counts and a unified diff built from their patches (bounded).
For a review comment: its file, line and diff hunk, and the rest of its review thread.
Issues a text links with a closing keyword ("Fixes #12") are fetched too. Every read is
bounded by ``runtime.brief.attempts``; a read that fails is named in the brief.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from adapters.github import reads
from adapters.github.client import GitHubClient
from adapters.github.diff import changed_files, unified_diff
from runtime.brief.attempts import Failed, RetryPolicy, attempt
from runtime.brief.model import Gathered, Origin, Post, Section, Sender
from runtime.config import ContextConfig
from runtime.store.records import SenderPart
from runtime.threads import GitHubIssue

T = TypeVar("T")
MAX_COMMENTS = 300
MAX_FILES = 300
MAX_LINKED = 5
_ON_PULLS = frozenset({"review_comment", "pr_opened"})
_EXCERPT = 1500
_CLOSING = re.compile(
    r"(?i)\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+(?:([\w.-]+/[\w.-]+))?#(\d+)\b"
)


@dataclass
class _Found:
    """What one gathering has so far; the parts become a ``Gathered``."""

    facts: list[tuple[str, str]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # where linked issues are looked for

    def keep(self, result: T | Failed) -> T | None:
        if isinstance(result, Failed):
            self.missing.append(str(result))
            return None
        return result


class GitHubContext:
    def __init__(self, client: GitHubClient, settings: ContextConfig) -> None:
        self.client = client
        self.settings = settings
        self.policy = RetryPolicy(attempts=settings.fetch_attempts)

    async def gather(self, origin: Origin, ref: GitHubIssue) -> Gathered:
        found = _Found(texts=[origin.text])
        asked = origin.message.comment_id if isinstance(origin.message, GitHubIssue) else None
        read = partial(reads.issue, self.client, ref.repo, ref.number)
        issue = found.keep(await self._read(f"issue #{ref.number}", read))
        await self._header(ref.repo, ref.number, origin, issue, found)
        if issue is not None:
            await self._issue(ref.repo, issue, origin, asked, found)
        if origin.kind in _ON_PULLS or (issue is not None and issue.is_pull):
            await self._pull(ref.repo, ref.number, found)
        if origin.kind == "review_comment" and asked is not None:
            await self._review(ref.repo, ref.number, asked, found)
        await self._linked(ref.repo, ref.number, found)
        return Gathered(
            facts=tuple(found.facts),
            request=origin.text,
            sections=tuple(found.sections),
            missing=tuple(found.missing),
        )

    async def sender(self, part: SenderPart) -> Sender:
        return Sender(part.name or part.sender_id or "someone", part.url or None)

    async def repository(self, repo: str, missing: list[str]) -> str:
        """``owner/name (default branch …)``, or the bare name and a gap."""
        branch = await self._read(
            "the repository's default branch", partial(reads.default_branch, self.client, repo)
        )
        if isinstance(branch, Failed):
            missing.append(str(branch))
            return repo
        return f"{repo} (default branch {branch})"

    async def summaries(self, links: Sequence[tuple[str, int]]) -> tuple[Section | None, list[str]]:
        """Issues and pull requests a Slack thread links to: title, state, body excerpt."""
        found = _Found()
        lines = []
        for repo, number in links[:MAX_LINKED]:
            read = partial(reads.issue, self.client, repo, number)
            issue = found.keep(await self._read(f"{repo}#{number}", read))
            if issue is not None:
                lines.append(summary(repo, issue, excerpt=True))
        title = "GitHub issues and pull requests linked in the thread"
        return (Section(title, "\n\n".join(lines)) if lines else None), found.missing

    # -- parts ------------------------------------------------------------------------------

    async def _header(
        self, repo: str, number: int, origin: Origin, issue: reads.IssueInfo | None, found: _Found
    ) -> None:
        kind = (origin.kind or "comment").replace("_", " ")
        found.facts.append(("Came from", f"GitHub {kind} on {repo}#{number}"))
        link = origin.url or (issue.url if issue else None)
        if link:
            found.facts.append(("Link", str(link)))
        found.facts.append(("Repository", await self.repository(repo, found.missing)))
        if issue is not None:
            noun = "Pull request" if issue.is_pull else "Issue"
            found.facts.append((noun, f"#{number} {issue.title} ({issue.state}) {issue.url}"))

    async def _issue(
        self,
        repo: str,
        issue: reads.IssueInfo,
        origin: Origin,
        asked: int | None,
        found: _Found,
    ) -> None:
        noun = "Pull request" if issue.is_pull else "Issue"
        labels = ", ".join(issue.labels) or "none"
        opened = f" on {issue.created_at:%Y-%m-%d}" if issue.created_at else ""
        header = f"State: {issue.state} · Labels: {labels} · Opened by {issue.author}{opened}"
        body = f"{header}\n\n{issue.body or '(no description)'}"
        found.sections.append(Section(f"{noun} #{issue.number}: {issue.title}", body))
        found.texts.append(issue.body)
        read = partial(reads.comments, self.client, repo, issue.number, MAX_COMMENTS)
        listed = found.keep(await self._read(f"the comments on #{issue.number}", read))
        if listed is None:
            return
        trigger = asked if origin.kind == "issue_comment" else None
        posts = until_request(listed.items, trigger)
        found.texts += [p.text for p in posts]
        if posts:
            more = ", the first ones" if listed.more else ""
            title = f"Comments on #{issue.number} ({len(posts)}{more}, up to the request)"
            found.sections.append(Section(title, posts=tuple(posts)))

    async def _pull(self, repo: str, number: int, found: _Found) -> None:
        read = partial(self.client.get_pull, repo, number)
        pull = found.keep(await self._read(f"pull request #{number}", read))
        if pull is None:
            return
        lines = [f"Head: {pull.head_ref} at {pull.head_sha} → base: {pull.base_ref}"]
        short = pull.head_sha[:12]
        read_ci = partial(self.client.ci_state, repo, pull.head_sha)
        ci = found.keep(await self._read(f"check runs on {short}", read_ci))
        if ci is not None:
            shown = ", ".join(f"{r.name}: {r.conclusion or r.status}" for r in ci[0])
            lines.append(f"Latest check runs on {short}: {shown or 'none reported'}")
        title = f"Pull request #{number}: branches and checks"
        found.sections.append(Section(title, "\n".join(lines)))
        read_files = partial(reads.pull_files, self.client, repo, number, MAX_FILES)
        files = found.keep(await self._read("the changed files", read_files))
        if files is None:
            return
        count = f"{len(files.items)}{' or more' if files.more else ''}"
        found.sections.append(Section(f"Changed files ({count})", changed_files(files.items)))
        diff = unified_diff(files.items, self.settings.max_chars * 4)
        found.sections.append(Section("Diff", diff))

    async def _review(self, repo: str, number: int, comment_id: int, found: _Found) -> None:
        read = partial(reads.review_comment, self.client, repo, number, comment_id)
        comment = found.keep(await self._read("the review comment", read))
        if comment is None:
            return
        where = f"{comment.path}, line {comment.line}" if comment.line else comment.path
        hunk = f"```diff\n{comment.diff_hunk}\n```"
        found.sections.append(Section(f"The review comment is on {where}", hunk))
        read_all = partial(reads.review_comments, self.client, repo, number, MAX_COMMENTS)
        listed = found.keep(await self._read("the review thread", read_all))
        if listed is None:
            return
        root = comment.in_reply_to or comment.comment_id
        posts = tuple(
            Post(c.author, c.body, c.created_at, is_request=c.comment_id == comment_id)
            for c in listed.items
            if root in (c.comment_id, c.in_reply_to)
        )
        found.texts += [p.text for p in posts]
        found.sections.append(Section(f"Review thread on {where}", posts=posts))

    async def _linked(self, repo: str, number: int, found: _Found) -> None:
        refs = [r for r in closing_refs(found.texts, repo) if r != (repo, number)]
        lines = []
        for linked_repo, linked in refs[:MAX_LINKED]:
            read = partial(reads.issue, self.client, linked_repo, linked)
            issue = found.keep(await self._read(f"linked issue {linked_repo}#{linked}", read))
            if issue is not None:
                lines.append(summary(linked_repo, issue, excerpt=False))
        if lines:
            found.sections.append(Section("Linked issues", "\n".join(lines)))

    async def _read(self, what: str, read: Callable[[], Awaitable[T]]) -> T | Failed:
        return await attempt(what, read, self.policy)


def closing_refs(texts: Iterable[str], repo: str) -> list[tuple[str, int]]:
    """Issues ``texts`` close by keyword ("Fixes #12", "closes acme/api#3"), in order."""
    found = (
        (other or repo, int(number)) for text in texts for other, number in _CLOSING.findall(text)
    )
    return list(dict.fromkeys(found))


def until_request(comments: Sequence[reads.CommentInfo], trigger: int | None) -> list[Post]:
    """The comments up to and including the request (all of them if it is not among them)."""
    posts = []
    for comment in comments:
        is_request = comment.comment_id == trigger
        posts.append(Post(comment.author, comment.body, comment.created_at, is_request=is_request))
        if is_request:
            break
    return posts


def summary(repo: str, issue: reads.IssueInfo, *, excerpt: bool) -> str:
    noun = "pull request" if issue.is_pull else "issue"
    line = f"{repo}#{issue.number} ({noun}, {issue.state}): {issue.title} — {issue.url}"
    if not excerpt or not issue.body.strip():
        return line
    body = issue.body.strip()
    cut = body if len(body) <= _EXCERPT else body[:_EXCERPT] + "…"
    return f"{line}\n{cut}"
