"""The GitHub tools: open a pull request, wait for CI on a sha, comment on an issue (and,
from ``adapters/github/review.py``, read and answer a pull request's review threads; from
``submit_review.py`` and ``review_since.py``, review a pull request).

Writes are at most once. ``open_pull_request`` reconciles by listing pulls with
``head=owner:branch`` (GitHub also refuses a second open pull for one head and base), and
``comment_on_issue`` by the hidden marker carrying the call id. When a create's response is
lost in transport, ``start`` reconciles at once instead of reporting an unknown outcome.
Every pull request is read back before it is cited. The repository comes from the task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any, ClassVar

from adapters.github.client import CheckRunInfo, GitHubClient, PullRequestInfo, StatusInfo
from adapters.github.markdown import title_for_github, to_github
from adapters.github.review import ReplyToReviewThreads, ReviewThreads
from adapters.github.review_since import ReviewSince
from adapters.github.submit_review import SubmitReview
from adapters.github.surface import marker, with_marker
from adapters.github.toolbase import (
    GitHubRead,
    GitHubTool,
    RepoFor,
    call_key,
    fixed_repo,
    workspace_head,
)
from runtime.errors import NotFound, Permanent, Retryable
from runtime.evidence import EvidenceItem, Strength
from runtime.tools.base import Completed, Effect, Pending, Started, Tool, ToolContext, Unknown

__all__ = ["RepoFor", "fixed_repo", "github_tools"]

_SHA = re.compile(r"^[0-9a-f]{40}$")
_PASSED = frozenset({"success", "neutral", "skipped"})
LOG_LINES = 200
LOG_CHARS = 20_000


class OpenPullRequest(GitHubTool):
    name = "open_pull_request"
    description = (
        "Open a pull request from a pushed branch. Returns its number, URL and head sha as "
        "read back from GitHub."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "branch": {"type": "string", "description": "the pushed head branch"},
            "title": {"type": "string"},
            "body": {"type": "string"},
            "base": {"type": "string", "description": "target branch, e.g. main"},
        },
        "required": ["branch", "title", "base"],
    }
    effect: ClassVar[Effect] = "write"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        repo = await self.repo_for(ctx.task_id)
        try:
            created = await self.client.create_pull(
                repo,
                head=args["branch"],
                base=args["base"],
                title=title_for_github(str(args["title"]), self.allowed_mentions),
                body=to_github(str(args.get("body") or ""), self.allowed_mentions),
            )
        except Retryable as lost:
            return await self._found_or_raise(args, ctx, lost)
        except Permanent as refused:
            if "already exists" not in str(refused):
                return Completed(f"GitHub refused the pull request: {refused}", is_error=True)
            return await self._found_or_raise(args, ctx, refused)
        return await self._read_back(repo, created.number, existed=False)

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        repo = await self.repo_for(ctx.task_id)
        branch = str(args["branch"])
        # A branch on a fork already names its owner ("fork:branch").
        head = branch if ":" in branch else f"{repo.split('/')[0]}:{branch}"
        pulls = await self.client.find_pulls(repo, head=head)
        matching = [p for p in pulls if p.base_ref == args["base"]] or pulls
        # The open one is the pull request a push to the branch updates (and the one GitHub
        # means by "already exists"); a closed one of the same head only when none is open.
        matching = [p for p in matching if p.state == "open"] or matching
        if not matching:
            return Unknown(f"no pull request with head {head}")
        newest = max(matching, key=lambda p: p.number)
        return await self._read_back(repo, newest.number, existed=True)

    async def _found_or_raise(
        self, args: dict[str, Any], ctx: ToolContext, error: Exception
    ) -> Completed:
        found = await self.reconcile(args, ctx)
        if isinstance(found, Completed):
            return found
        raise error

    async def _read_back(self, repo: str, number: int, *, existed: bool) -> Completed:
        pull = await self.client.get_pull(repo, number)
        output = {
            "number": pull.number,
            "url": pull.url,
            "head_sha": pull.head_sha,
            "state": pull.state,
            "found_existing": existed,
        }
        return Completed(json.dumps(output), evidence=(_pull_evidence(repo, pull),))


def _pull_evidence(repo: str, pull: PullRequestInfo) -> EvidenceItem:
    return EvidenceItem(
        kind="pull_request",
        ref=pull.url,
        strength=Strength.provider_read_back,
        detail={
            "repo": repo,
            "number": pull.number,
            "url": pull.url,
            "head_sha": pull.head_sha,
            "head_ref": pull.head_ref,
            "base_ref": pull.base_ref,
            "state": pull.state,
        },
    )


class WaitForCi(GitHubTool):
    name = "wait_for_ci"
    description = (
        "Wait for the CI checks and commit statuses on one commit sha to finish, and report "
        "their conclusions."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "sha": {
                "type": "string",
                "description": "the full 40-character sha, or HEAD for the workspace's HEAD",
            }
        },
        "required": ["sha"],
    }
    effect: ClassVar[Effect] = "wait"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        sha = str(args.get("sha", "")).strip().lower()
        if sha == "head":
            sha = await workspace_head(ctx) or sha
        if not _SHA.match(sha):
            return Completed(f"wait_for_ci needs a full 40-character sha, got {sha!r}", True)
        return Started(handle=sha)

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        repo = await self.repo_for(ctx.task_id)
        runs, statuses = await self.client.ci_state(repo, handle)
        if not runs and not statuses:
            return Pending("no checks reported yet")
        running = [r.name for r in runs if r.status != "completed"]
        running += [s.context for s in statuses if s.state == "pending"]
        if running:
            return Pending(f"still running: {', '.join(running)}")
        return _ci_outcome(repo, handle, runs, statuses)

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("wait_for_ci is resumed by polling its sha, not reconciled")


class CiJobLog(GitHubRead):
    name = "ci_job_log"
    description = (
        "Read the tail of a GitHub Actions job's log, by the id of its check run (a failed "
        "check's follow-up names it)."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "check_run_id": {"type": "integer"},
            "lines": {"type": "integer", "description": "how many last lines (default 200)"},
        },
        "required": ["check_run_id"],
    }

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        repo, job_id = await self.repo_for(ctx.task_id), int(args["check_run_id"])
        lines = max(1, min(int(args.get("lines") or LOG_LINES), LOG_LINES * 5))
        try:
            text = await self.client.job_log(repo, job_id)
        except NotFound:
            return Completed(f"no GitHub Actions log for check run {job_id}", is_error=True)
        tail = text.splitlines()[-lines:]
        clipped = "\n".join(tail)[-LOG_CHARS:]
        return Completed(f"last {len(tail)} lines of the log of job {job_id}:\n{clipped}")


def _ci_outcome(
    repo: str, sha: str, runs: list[CheckRunInfo], statuses: list[StatusInfo]
) -> Completed:
    checks: list[dict[str, Any]] = [
        {"name": r.name, "conclusion": r.conclusion, "url": r.url} for r in runs
    ]
    checks += [{"name": s.context, "conclusion": s.state, "url": None} for s in statuses]
    failed = [c for c in checks if c["conclusion"] not in _PASSED]
    on_sha = all(r.head_sha == sha for r in runs)
    passed = not failed and on_sha
    detail = {"repo": repo, "sha": sha, "checks": checks, "failed": failed, "on_sha": on_sha}
    strength = Strength.verified if passed else Strength.tool_reported
    evidence = EvidenceItem("ci_run", f"{repo}@{sha}", strength, detail)
    if passed:
        output = f"CI passed on {sha}: {', '.join(c['name'] for c in checks)}"
    elif failed:
        output = f"CI failed on {sha}: " + ", ".join(
            f"{c['name']} ({c['conclusion']})" for c in failed
        )
    else:
        output = f"CI checks reported for a different sha than {sha}"
    return Completed(output, is_error=not passed, evidence=(evidence,))


class CommentOnIssue(GitHubTool):
    name = "comment_on_issue"
    description = "Post a comment on an issue or pull request of the task's repository."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"number": {"type": "integer"}, "text": {"type": "string"}},
        "required": ["number", "text"],
    }
    effect: ClassVar[Effect] = "write"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        repo, number = await self.repo_for(ctx.task_id), int(args["number"])
        text = to_github(str(args["text"]), self.allowed_mentions)
        body = with_marker(text, call_key(ctx))
        try:
            comment = await self.client.create_comment(repo, number, body)
        except Retryable as lost:
            found = await self.reconcile(args, ctx)
            if isinstance(found, Completed):
                return found
            raise lost
        return _commented(repo, number, comment.comment_id, comment.url, Strength.tool_reported)

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        repo, number = await self.repo_for(ctx.task_id), int(args["number"])
        wanted = marker(call_key(ctx))
        for comment in await self.client.list_comments(repo, number):
            if comment.body.rstrip().endswith(wanted):
                read_back = Strength.provider_read_back
                return _commented(repo, number, comment.comment_id, comment.url, read_back)
        return Unknown(f"no comment on {repo}#{number} carries call {ctx.call_id}")


def _commented(repo: str, number: int, comment_id: int, url: str, strength: Strength) -> Completed:
    evidence = EvidenceItem(
        "comment", url, strength, {"repo": repo, "number": number, "comment_id": comment_id}
    )
    output = json.dumps({"comment_id": comment_id, "url": url})
    return Completed(output, evidence=(evidence,))


def github_tools(
    client: GitHubClient,
    repo_for: RepoFor,
    *,
    allowed_mentions: Collection[str] = (),
    allow_approve: bool = False,
    bot_login: str | None = None,
) -> list[Tool]:
    """The tools an agent with GitHub access gets (each agent's ``tools`` picks from them);
    ``allow_approve`` and ``bot_login`` are the review settings (``review.allow_approve``,
    ``github.bot_login``)."""
    mentions = {"allowed_mentions": allowed_mentions}
    return [
        OpenPullRequest(client, repo_for, **mentions),
        WaitForCi(client, repo_for, **mentions),
        CiJobLog(client, repo_for, **mentions),
        CommentOnIssue(client, repo_for, **mentions),
        ReviewThreads(client, repo_for, **mentions),
        ReplyToReviewThreads(client, repo_for, **mentions),
        SubmitReview(
            client,
            repo_for,
            allowed_mentions=allowed_mentions,
            allow_approve=allow_approve,
            bot_login=bot_login,
        ),
        ReviewSince(client, repo_for, bot_login=bot_login),
    ]
