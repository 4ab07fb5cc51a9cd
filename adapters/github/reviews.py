"""A pull request's reviews on GitHub: create one with its inline comments, list them, and
read one's comments back.

Like ``reads.py``, each call runs PyGithub through ``GitHubClient.call`` (a worker thread,
errors translated) and hands back frozen values. The create is one POST through PyGithub's
requester: ``PullRequest.create_review`` would first GET the pull request and the commit
only to learn the sha Keel already has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from adapters.github.client import GitHubClient, ReviewCommentInfo, review_comment_of

if TYPE_CHECKING:
    from github import Github

ReviewEvent = Literal["COMMENT", "REQUEST_CHANGES", "APPROVE"]
Side = Literal["LEFT", "RIGHT"]


@dataclass(frozen=True, slots=True)
class InlineComment:
    """A comment of a new review on one line of the diff (``side`` LEFT: the old file)."""

    path: str
    line: int
    side: Side
    body: str


@dataclass(frozen=True, slots=True)
class ReviewInfo:
    review_id: int
    body: str
    state: str  # COMMENTED, CHANGES_REQUESTED, APPROVED, PENDING, DISMISSED
    commit_id: str
    url: str
    author: str


async def create_review(
    client: GitHubClient,
    repo: str,
    number: int,
    *,
    commit_id: str,
    event: ReviewEvent,
    body: str,
    comments: Sequence[InlineComment],
) -> ReviewInfo:
    payload = {
        "commit_id": commit_id,
        "event": event,
        "body": body,
        "comments": [
            {"path": c.path, "line": c.line, "side": c.side, "body": c.body} for c in comments
        ],
    }

    def post(gh: Github) -> ReviewInfo:
        path = f"/repos/{repo}/pulls/{number}/reviews"
        _, data = gh.requester.requestJsonAndCheck("POST", path, input=payload)
        return _review(data)

    return await client.call(post, repo=repo)


async def reviews(client: GitHubClient, repo: str, number: int) -> list[ReviewInfo]:
    def read(gh: Github) -> list[ReviewInfo]:
        return [_review(r.raw_data) for r in gh.get_repo(repo).get_pull(number).get_reviews()]

    return await client.call(read, repo=repo)


async def review_comments(
    client: GitHubClient, repo: str, number: int, review_id: int
) -> list[ReviewCommentInfo]:
    """The inline comments posted in one review, as GitHub has them."""

    def read(gh: Github) -> list[ReviewCommentInfo]:
        found = gh.get_repo(repo).get_pull(number).get_single_review_comments(review_id)
        return [review_comment_of(c) for c in found]

    return await client.call(read, repo=repo)


def _review(raw: dict[str, Any]) -> ReviewInfo:
    user = raw.get("user") or {}
    return ReviewInfo(
        review_id=int(raw["id"]),
        body=str(raw.get("body") or ""),
        state=str(raw.get("state") or ""),
        commit_id=str(raw.get("commit_id") or ""),
        url=str(raw.get("html_url") or ""),
        author=str(user.get("login") or ""),
    )
