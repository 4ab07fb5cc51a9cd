"""``review_since``: what a re-review needs: Keel's last review of a pull request, its
threads, and what the commits since changed.

It finds Keel's latest review by the marker ``submit_review`` puts in its body (only in a
review Keel posted: anyone can paste a marker), reads the head that review was of, lists the
threads Keel's reviews started (each with the id a reply names and whether Keel already
answered it), and the diff from that head to the current one, bounded. The model then
answers the findings the new commits fixed instead of repeating them.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from adapters.github import reads
from adapters.github.client import GitHubClient, ReviewCommentInfo
from adapters.github.diff import unified_diff
from adapters.github.review import HUNK_LIMIT, threads_of
from adapters.github.reviews import ReviewInfo, reviews
from adapters.github.submit_review import FILE_LIMIT, own_logins, review_key
from adapters.github.surface import marker
from adapters.github.toolbase import GitHubRead, RepoFor
from runtime.errors import NotFound
from runtime.tools.base import Completed, Started, ToolContext

DIFF_LIMIT = 30_000


class ReviewSince(GitHubRead):
    name = "review_since"
    description = (
        "Before re-reviewing a pull request: Keel's previous review of it (the head it "
        "reviewed, its body), the threads Keel's reviews started (reply to them by "
        "comment_id in submit_review), and the diff from the previously reviewed head to "
        "the current one. previous_review is null when Keel has not reviewed it yet."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"number": {"type": "integer"}},
        "required": ["number"],
    }

    def __init__(self, client: GitHubClient, repo_for: RepoFor, *, bot_login: str | None = None):
        super().__init__(client, repo_for)
        self.own_logins = own_logins(bot_login)

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        repo, number = await self.repo_for(ctx.task_id), int(args["number"])
        head = (await self.client.get_pull(repo, number)).head_sha
        ours = [r for r in await reviews(self.client, repo, number) if self._ours(repo, number, r)]
        if not ours:
            return Completed(json.dumps({"head_sha": head, "previous_review": None}))
        last = max(ours, key=lambda r: r.review_id)
        threads = threads_of(await self.client.review_comments(repo, number))
        started = {r.review_id for r in ours}
        output = {
            "head_sha": head,
            "previous_review": {"head_sha": last.commit_id, "state": last.state, "body": last.body},
            "threads": [_thread(t) for t in threads.values() if t[0].review_id in started],
            "diff_since": await self._diff(repo, last.commit_id, head),
        }
        return Completed(json.dumps(output, ensure_ascii=False))

    def _ours(self, repo: str, number: int, review: ReviewInfo) -> bool:
        by_us = not self.own_logins or review.author.lower() in self.own_logins
        return by_us and marker(review_key(repo, number, review.commit_id)) in review.body

    async def _diff(self, repo: str, base: str, head: str) -> str:
        if base == head:
            return "(no new commits since the previous review)"
        try:
            changed = await reads.changed_between(self.client, repo, base, head, FILE_LIMIT)
        except NotFound:
            return f"(GitHub cannot compare {base} with {head}: the branch was rewritten)"
        return unified_diff(changed.items, DIFF_LIMIT)


def _thread(thread: list[ReviewCommentInfo]) -> dict[str, Any]:
    first = thread[0]
    return {
        "comment_id": first.comment_id,
        "path": first.path,
        "line": first.line,
        "side": first.side,
        "written_on": first.commit_id,
        "diff_hunk": first.diff_hunk[-HUNK_LIMIT:],
        "answered": len(thread) > 1 and "<!-- keel:" in thread[-1].body,
        "comments": [{"author": c.author, "body": c.body} for c in thread],
    }
