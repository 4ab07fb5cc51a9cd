"""The GitHub reads of a task brief: issue, comments, pull request files, review comments.

Each runs PyGithub through ``GitHubClient.call`` (in a worker thread, errors translated) and
hands back frozen values. Lists are read page by page only as far as ``limit``; the caller
learns whether more were left.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from adapters.github.client import GitHubClient

if TYPE_CHECKING:
    from github import Github

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IssueInfo:
    number: int
    title: str
    body: str
    state: str
    labels: tuple[str, ...]
    url: str
    author: str
    created_at: datetime | None
    is_pull: bool


@dataclass(frozen=True, slots=True)
class CommentInfo:
    comment_id: int
    author: str
    body: str
    created_at: datetime | None
    url: str


@dataclass(frozen=True, slots=True)
class FileChange:
    filename: str
    status: str
    additions: int
    deletions: int
    patch: str | None


@dataclass(frozen=True, slots=True)
class ReviewCommentInfo:
    comment_id: int
    author: str
    body: str
    path: str
    line: int | None
    diff_hunk: str
    in_reply_to: int | None
    created_at: datetime | None
    url: str


@dataclass(frozen=True, slots=True)
class Listed(Generic[T]):
    """The first ``limit`` items of a list, and whether it went on past them."""

    items: tuple[T, ...]
    more: bool


def _first(items: Iterable[T], limit: int) -> Listed[T]:
    taken = list(itertools.islice(items, limit + 1))
    return Listed(tuple(taken[:limit]), len(taken) > limit)


async def default_branch(client: GitHubClient, repo: str) -> str:
    return await client.call(lambda gh: str(gh.get_repo(repo).default_branch), repo=repo)


async def issue(client: GitHubClient, repo: str, number: int) -> IssueInfo:
    def read(gh: Github) -> IssueInfo:
        found = gh.get_repo(repo).get_issue(number)
        return IssueInfo(
            number=found.number,
            title=found.title or "",
            body=found.body or "",
            state=found.state or "",
            labels=tuple(label.name for label in found.labels),
            url=found.html_url or "",
            author=found.user.login if found.user else "someone",
            created_at=found.created_at,
            is_pull=found.pull_request is not None,
        )

    return await client.call(read, repo=repo)


async def comments(
    client: GitHubClient, repo: str, number: int, limit: int
) -> Listed[CommentInfo]:
    def read(gh: Github) -> Listed[CommentInfo]:
        found = gh.get_repo(repo).get_issue(number).get_comments()
        return _first((_comment(c) for c in found), limit)

    return await client.call(read, repo=repo)


async def pull_files(
    client: GitHubClient, repo: str, number: int, limit: int
) -> Listed[FileChange]:
    def read(gh: Github) -> Listed[FileChange]:
        found = gh.get_repo(repo).get_pull(number).get_files()
        return _first((_change(f) for f in found), limit)

    return await client.call(read, repo=repo)


async def changed_between(
    client: GitHubClient, repo: str, base: str, head: str, limit: int
) -> Listed[FileChange]:
    """The files changed from commit ``base`` to commit ``head`` (GitHub's compare)."""

    def read(gh: Github) -> Listed[FileChange]:
        found = gh.get_repo(repo).compare(base, head).files
        return _first((_change(f) for f in found), limit)

    return await client.call(read, repo=repo)


async def review_comment(
    client: GitHubClient, repo: str, number: int, comment_id: int
) -> ReviewCommentInfo:
    def read(gh: Github) -> ReviewCommentInfo:
        found = gh.get_repo(repo).get_pull(number).get_review_comment(comment_id)
        return _review(found.raw_data)

    return await client.call(read, repo=repo)


async def review_comments(
    client: GitHubClient, repo: str, number: int, limit: int
) -> Listed[ReviewCommentInfo]:
    def read(gh: Github) -> Listed[ReviewCommentInfo]:
        found = gh.get_repo(repo).get_pull(number).get_review_comments()
        return _first((_review(c.raw_data) for c in found), limit)

    return await client.call(read, repo=repo)


def _comment(comment: Any) -> CommentInfo:
    return CommentInfo(
        comment_id=comment.id,
        author=comment.user.login if comment.user else "someone",
        body=comment.body or "",
        created_at=comment.created_at,
        url=comment.html_url or "",
    )


def _change(file: Any) -> FileChange:
    return FileChange(file.filename, file.status, file.additions, file.deletions, file.patch)


def _review(raw: dict[str, Any]) -> ReviewCommentInfo:
    user = raw.get("user") or {}
    created = raw.get("created_at")
    return ReviewCommentInfo(
        comment_id=int(raw["id"]),
        author=str(user.get("login") or "someone"),
        body=str(raw.get("body") or ""),
        path=str(raw.get("path") or ""),
        line=raw.get("line") or raw.get("original_line"),
        diff_hunk=str(raw.get("diff_hunk") or ""),
        in_reply_to=raw.get("in_reply_to_id"),
        created_at=datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None,
        url=str(raw.get("html_url") or ""),
    )
