"""The review loop's tools: read a pull request's review threads, and answer them.

``review_threads`` gives the agent every review thread of a pull request (path, line, diff
hunk, the comments in order), marking the ones whose last word is Keel's as answered (the
REST API does not say which threads a person resolved). ``reply_to_review_threads`` answers
in the threads themselves, after a push: Keel adds the commit the workspace's HEAD is, so each
reply names the SHA that addressed it. Each reply carries a hidden marker with the call id,
so a lost response is reconciled by finding it instead of replying twice.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, ClassVar

from adapters.github.client import ReviewCommentInfo
from adapters.github.markdown import to_github
from adapters.github.surface import marker, with_marker
from adapters.github.toolbase import GitHubRead, GitHubTool, call_key, workspace_head
from runtime.evidence import EvidenceItem, Strength
from runtime.tools.base import Completed, Effect, Started, ToolContext, Unknown

HUNK_LIMIT = 1500
_KEEL = "<!-- keel:"


def threads_of(comments: list[ReviewCommentInfo]) -> dict[int, list[ReviewCommentInfo]]:
    """Review comments by thread (the id of its first comment), each thread in order."""
    threads: dict[int, list[ReviewCommentInfo]] = defaultdict(list)
    for comment in sorted(comments, key=lambda c: c.comment_id):
        threads[comment.in_reply_to or comment.comment_id].append(comment)
    return dict(threads)


def _answered(thread: list[ReviewCommentInfo]) -> bool:
    return _KEEL in thread[-1].body


class ReviewThreads(GitHubRead):
    name = "review_threads"
    description = (
        "List the review threads of a pull request: file, line, diff hunk and comments; "
        "'answered' means Keel replied last."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"number": {"type": "integer"}},
        "required": ["number"],
    }

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        repo, number = await self.repo_for(ctx.task_id), int(args["number"])
        threads = threads_of(await self.client.review_comments(repo, number))
        listed = [
            {
                "comment_id": first_id,
                "path": thread[0].path,
                "line": thread[0].line,
                "diff_hunk": thread[0].diff_hunk[-HUNK_LIMIT:],
                "answered": _answered(thread),
                "comments": [{"author": c.author, "body": c.body} for c in thread],
            }
            for first_id, thread in threads.items()
        ]
        return Completed(json.dumps(listed, ensure_ascii=False))


class ReplyToReviewThreads(GitHubTool):
    name = "reply_to_review_threads"
    description = (
        "After pushing a fix, reply in review threads of a pull request (one thread by the "
        "id of its first comment, or every thread not yet answered). Keel adds the pushed "
        "commit's SHA to each reply."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "number": {"type": "integer"},
            "text": {"type": "string"},
            "comment_id": {"type": "integer"},
        },
        "required": ["number", "text"],
    }
    effect: ClassVar[Effect] = "write"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        return await self._reply(args, ctx)

    async def _reply(self, args: dict[str, Any], ctx: ToolContext) -> Completed:
        repo, number = await self.repo_for(ctx.task_id), int(args["number"])
        threads = threads_of(await self.client.review_comments(repo, number))
        wanted = _targets(threads, args.get("comment_id"))
        if not wanted:
            return Completed("no review thread to reply in", is_error=True)
        sha = await workspace_head(ctx)
        text = to_github(str(args["text"]).rstrip(), self.allowed_mentions)
        body = with_marker(f"{text}\n\nAddressed in {sha}." if sha else text, call_key(ctx))
        done = [
            await self.client.reply_to_review_comment(repo, number, first_id, body)
            for first_id in wanted
            if not _replied(threads[first_id], ctx)
        ]
        return _replied_in(repo, number, done, sha)

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        """Replied if every thread it was for carries this call's marker; the rest are
        answered now (the marker makes a second reply in one thread impossible)."""
        return await self._reply(args, ctx)


def _targets(threads: dict[int, list[ReviewCommentInfo]], comment_id: Any) -> list[int]:
    if comment_id is not None:
        first = int(comment_id)
        found = next((k for k, t in threads.items() if any(c.comment_id == first for c in t)), None)
        return [found] if found is not None else []
    return [k for k, thread in threads.items() if not _answered(thread)]


def _replied(thread: list[ReviewCommentInfo], ctx: ToolContext) -> bool:
    return any(c.body.rstrip().endswith(marker(call_key(ctx))) for c in thread)


def _replied_in(
    repo: str, number: int, replies: list[ReviewCommentInfo], sha: str | None
) -> Completed:
    evidence = tuple(
        EvidenceItem(
            "comment",
            reply.url,
            Strength.tool_reported,
            {"repo": repo, "number": number, "comment_id": reply.comment_id, "sha": sha},
        )
        for reply in replies
    )
    output = {"replied": [r.url for r in replies], "sha": sha}
    return Completed(json.dumps(output), evidence=evidence)
