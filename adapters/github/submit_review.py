"""``submit_review``: one pull request review with inline comments, once per reviewed head.

Every inline comment is checked against the pull request's diff at the head being reviewed
before anything is posted: a (path, line, side) the diff does not show goes back to the model
as an error naming the lines it may use, and nothing is posted (GitHub would refuse the whole
review with a 422 that does not say which comment was wrong). Replies to earlier review
threads ("fixed in <sha>") are checked to be threads of this pull request.

The review body ends with a hidden marker naming (pull request, head sha), so a redelivered
request, a second call or a crash after the POST finds the review already posted instead of
posting another; the body also carries the call's own marker, which ``reconcile`` looks for
after a lost response even when the head has moved since. Replies carry a marker of the head
and thread, so each thread is answered once per head. The posted review is read back and its
comments counted: that is the evidence a reply cites.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, ClassVar

from adapters.github import reads
from adapters.github.client import GitHubClient, ReviewCommentInfo
from adapters.github.diff import DiffLines, diff_lines
from adapters.github.markdown import to_github
from adapters.github.review import threads_of
from adapters.github.reviews import (
    InlineComment,
    ReviewEvent,
    ReviewInfo,
    Side,
    create_review,
    review_comments,
    reviews,
)
from adapters.github.surface import marker, with_marker
from adapters.github.toolbase import GitHubTool, RepoFor, call_key
from runtime.errors import Permanent, Retryable
from runtime.evidence import EvidenceItem, Strength
from runtime.tools.base import Completed, Effect, Started, ToolContext, Unknown

# A review's inline comments and replies; more is a model running away, not a review.
MAX_COMMENTS = 50
FILE_LIMIT = 300  # GitHub lists at most 3000 files; a review of more is not a line review
_EVENTS: dict[str, ReviewEvent] = {
    "COMMENT": "COMMENT",
    "REQUEST_CHANGES": "REQUEST_CHANGES",
    "APPROVE": "APPROVE",
}
_SIDES: dict[str, Side] = {"RIGHT": "RIGHT", "LEFT": "LEFT"}
_MARKER_START = "<!-- keel:"


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer in an earlier review thread; ``fixed`` adds the head that fixed it."""

    comment_id: int
    body: str
    fixed: bool


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    number: int
    event: ReviewEvent
    body: str
    comments: tuple[InlineComment, ...]
    replies: tuple[Reply, ...]


def review_key(repo: str, number: int, head_sha: str) -> str:
    """What makes a review one: the pull request and the head it reviewed."""
    return f"review:{repo}#{number}@{head_sha}"


class SubmitReview(GitHubTool):
    name = "submit_review"
    description = (
        "Submit one review of a pull request at its current head: a summary body, an event "
        "(COMMENT or REQUEST_CHANGES), inline comments on lines of the diff (path, line, "
        "side RIGHT for the new file or LEFT for the old one), and replies to earlier review "
        "threads by the id of their first comment (fixed: true says the head fixed it). A "
        "comment on a line the diff does not show is refused with the lines you may use; "
        "nothing is posted until every comment lands. One review per head: asking again "
        "returns the review already posted."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "number": {"type": "integer"},
            "event": {"type": "string", "enum": ["COMMENT", "REQUEST_CHANGES", "APPROVE"]},
            "body": {
                "type": "string",
                "description": "the summary; on a re-review, what changed since the last review",
            },
            "comments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "line": {"type": "integer"},
                        "side": {"type": "string", "enum": ["RIGHT", "LEFT"]},
                        "body": {"type": "string"},
                    },
                    "required": ["path", "line", "body"],
                },
            },
            "replies": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "comment_id": {"type": "integer"},
                        "body": {"type": "string"},
                        "fixed": {"type": "boolean"},
                    },
                    "required": ["comment_id", "body"],
                },
            },
        },
        "required": ["number", "event", "body"],
    }
    effect: ClassVar[Effect] = "write"

    def __init__(
        self,
        client: GitHubClient,
        repo_for: RepoFor,
        *,
        allowed_mentions: Collection[str] = (),
        allow_approve: bool = False,
        bot_login: str | None = None,
    ) -> None:
        super().__init__(client, repo_for, allowed_mentions=allowed_mentions)
        # APPROVE is the operator's to allow (review.allow_approve): a bot's approval may
        # satisfy branch protection.
        self.allow_approve = allow_approve
        # Only our own reviews count as posted: anyone can paste a marker into theirs.
        self.own_logins = own_logins(bot_login)

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        request = _request(args, allow_approve=self.allow_approve)
        if isinstance(request, str):
            return Completed(request, is_error=True)
        repo = await self.repo_for(ctx.task_id)
        head = (await self.client.get_pull(repo, request.number)).head_sha
        existing = await self._posted(
            repo, request.number, marker(review_key(repo, request.number, head))
        )
        if existing is not None:
            return await self._finish(repo, request, existing, head, found_existing=True)
        threads = threads_of(await self.client.review_comments(repo, request.number))
        refused = await self._misplaced(repo, request, threads)
        if refused:
            return Completed(refused, is_error=True)
        try:
            review = await create_review(
                self.client,
                repo,
                request.number,
                commit_id=head,
                event=request.event,
                body=self._body(request, repo, head, ctx),
                comments=[self._shown(c) for c in request.comments],
            )
        except Retryable:
            found = await self.reconcile(args, ctx)
            if isinstance(found, Completed):
                return found
            raise
        except Permanent as refused_by_github:
            return Completed(f"GitHub refused the review: {refused_by_github}", is_error=True)
        return await self._finish(repo, request, review, head, found_existing=False)

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        """The review carrying this call's marker, finished (replies, read back) if found."""
        request = _request(args, allow_approve=self.allow_approve)
        if isinstance(request, str):
            return Unknown(request)
        repo = await self.repo_for(ctx.task_id)
        found = await self._posted(repo, request.number, marker(call_key(ctx)))
        if found is None:
            return Unknown(f"no review on {repo}#{request.number} carries call {ctx.call_id}")
        return await self._finish(repo, request, found, found.commit_id, found_existing=True)

    async def _posted(self, repo: str, number: int, wanted: str) -> ReviewInfo | None:
        for review in await reviews(self.client, repo, number):
            ours = not self.own_logins or review.author.lower() in self.own_logins
            if ours and wanted in review.body:
                return review
        return None

    async def _misplaced(
        self, repo: str, request: ReviewRequest, threads: dict[int, list[ReviewCommentInfo]]
    ) -> str:
        """What is wrong with the comments and replies, or "" when every one lands."""
        errors = [
            f"no review thread starts at comment {r.comment_id}"
            for r in request.replies
            if r.comment_id not in threads
        ]
        if request.comments:
            listed = await reads.pull_files(self.client, repo, request.number, FILE_LIMIT)
            on_diff = {f.filename: diff_lines(f.patch) for f in listed.items}
            errors += [e for c in request.comments if (e := _misplaced(c, on_diff))]
        if not errors:
            return ""
        return "Nothing was posted. Fix these and submit the whole review again:\n- " + (
            "\n- ".join(errors)
        )

    def _body(self, request: ReviewRequest, repo: str, head: str, ctx: ToolContext) -> str:
        text = self._text(request.body.rstrip())
        return with_marker(
            f"{text}\n\n{marker(call_key(ctx))}", review_key(repo, request.number, head)
        )

    def _shown(self, comment: InlineComment) -> InlineComment:
        return InlineComment(comment.path, comment.line, comment.side, self._text(comment.body))

    def _text(self, said: str) -> str:
        """The model's words as GitHub shows them, unable to pass for one of Keel's markers
        (a diff or REVIEW.md may talk the model into writing one)."""
        return to_github(said, self.allowed_mentions).replace(_MARKER_START, "<!-- quoted:")

    async def _finish(
        self,
        repo: str,
        request: ReviewRequest,
        review: ReviewInfo,
        head: str,
        *,
        found_existing: bool,
    ) -> Completed:
        replied = await self._reply(repo, request, head)
        posted = await review_comments(self.client, repo, request.number, review.review_id)
        output = {
            "review_id": review.review_id,
            "url": review.url,
            "state": review.state,
            "head_sha": head,
            "comments": len(posted),
            "replied": replied,
            "found_existing": found_existing,
        }
        evidence = EvidenceItem(
            "read_back",
            review.url,
            Strength.provider_read_back,
            {
                "repo": repo,
                "number": request.number,
                "review_id": review.review_id,
                "sha": head,
                "comments": len(posted),
                "state": review.state,
            },
        )
        return Completed(json.dumps(output), evidence=(evidence,))

    async def _reply(self, repo: str, request: ReviewRequest, head: str) -> list[int]:
        """Answer each thread once per head: a thread already carrying this head's reply
        marker (an earlier try, or another call on the same head) is skipped."""
        if not request.replies:
            return []
        threads = threads_of(await self.client.review_comments(repo, request.number))
        done: list[int] = []
        for reply in request.replies:
            key = f"{review_key(repo, request.number, head)}/thread:{reply.comment_id}"
            thread = threads.get(reply.comment_id, [])
            if not any(c.body.rstrip().endswith(marker(key)) for c in thread):
                text = self._text(reply.body.rstrip())
                said = f"{text}\n\nFixed in {head}." if reply.fixed else text
                await self.client.reply_to_review_comment(
                    repo, request.number, reply.comment_id, with_marker(said, key)
                )
            done.append(reply.comment_id)
        return done


def own_logins(bot_login: str | None) -> frozenset[str]:
    """The logins our reviews come from: an App posts as "<slug>[bot]", however configured."""
    if not bot_login:
        return frozenset()
    bare = bot_login.lower().removesuffix("[bot]")
    return frozenset({bare, f"{bare}[bot]"})


def _misplaced(comment: InlineComment, on_diff: dict[str, DiffLines]) -> str:
    lines = on_diff.get(comment.path)
    where = f"{comment.path} line {comment.line} ({comment.side})"
    if lines is None:
        return f"{where}: {comment.path} is not a file this pull request changes"
    if lines.has(comment.line, comment.side):
        return ""
    return (
        f"{where} is not on the diff; lines on the {comment.side} side: {lines.shown(comment.side)}"
    )


def _request(args: dict[str, Any], *, allow_approve: bool) -> ReviewRequest | str:
    """The arguments as a review, or what is wrong with them (the model fixes it)."""
    event = _EVENTS.get(str(args.get("event", "")).upper())
    if event is None:
        return "event must be COMMENT or REQUEST_CHANGES"
    if event == "APPROVE" and not allow_approve:
        return "Keel is not allowed to approve pull requests here; use COMMENT"
    raw_comments = args.get("comments") or []
    raw_replies = args.get("replies") or []
    if not isinstance(raw_comments, list) or not isinstance(raw_replies, list):
        return "comments and replies must be lists"
    if len(raw_comments) + len(raw_replies) > MAX_COMMENTS:
        return f"at most {MAX_COMMENTS} comments and replies in one review"
    try:
        comments = tuple(_comment(c) for c in raw_comments)
        replies = tuple(
            Reply(int(r["comment_id"]), str(r["body"]), bool(r.get("fixed"))) for r in raw_replies
        )
        number = int(args["number"])
    except (KeyError, TypeError, ValueError) as wrong:
        return f"a comment or reply is malformed: {wrong}"
    if not str(args.get("body") or "").strip() and event != "COMMENT":
        return "a review that requests changes needs a body"
    return ReviewRequest(number, event, str(args.get("body") or ""), comments, replies)


def _comment(raw: Any) -> InlineComment:
    side = _SIDES.get(str(raw.get("side") or "RIGHT").upper())
    if side is None:
        raise ValueError(f"side must be RIGHT or LEFT, got {raw.get('side')!r}")
    path, line, body = str(raw["path"]).lstrip("/"), int(raw["line"]), str(raw["body"])
    if line < 1 or not body.strip():
        raise ValueError(f"{path}: a comment needs a line from 1 and a body")
    return InlineComment(path, line, side, body)
