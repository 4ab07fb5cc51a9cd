"""The GitHub tools against the GitHub emulator through real PyGithub, faults included."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from adapters.config import GitHubConfig
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import serve
from adapters.github.client import GitHubClient
from adapters.github.review import ReplyToReviewThreads
from adapters.github.surface import marker
from adapters.github.tools import CommentOnIssue, OpenPullRequest, WaitForCi, fixed_repo
from runtime.errors import Retryable
from runtime.evidence import Strength
from runtime.tools.base import Completed, Pending, Started, Tool, ToolContext, Unknown

TOKEN = "ghp_keel_emulated"
REPO = "acme/widgets"
BRANCH = "keel/task-7"
HEAD_SHA = "1111111111111111111111111111111111111111"
SHA = "0123456789abcdef0123456789abcdef01234567"
PR_ARGS = {"branch": BRANCH, "title": "Fix the build", "body": "Closes #1", "base": "main"}


@dataclass(frozen=True, slots=True)
class GitHub:
    state: GitHubState
    client: GitHubClient


@pytest.fixture
def github() -> Iterator[GitHub]:
    state = GitHubState()
    state.add_token(TOKEN, "keel-bot")
    state.add_repo(REPO)
    state.add_issue(REPO, "Build is red", "Please fix CI", user="alice")
    state.set_branch(REPO, BRANCH, HEAD_SHA)
    with serve(create_github_app(state)) as server:
        config = GitHubConfig(token=TOKEN, api_url=server.url)
        yield GitHub(state, GitHubClient.from_config(config, timeout_s=5))


def _ctx(call_id: str = "call-1") -> ToolContext:
    return ToolContext(task_id="task-7", root_task_id="task-7", call_id=call_id)


def test_tools_satisfy_the_tool_port_when_built(github: GitHub) -> None:
    repo_for = fixed_repo(REPO)
    for tool in (OpenPullRequest, WaitForCi, CommentOnIssue):
        assert isinstance(tool(github.client, repo_for), Tool)


# -- open_pull_request ------------------------------------------------------------------


async def test_pull_request_read_back_when_opened(github: GitHub) -> None:
    tool = OpenPullRequest(github.client, fixed_repo(REPO))

    outcome = await tool.start(PR_ARGS, _ctx())

    assert isinstance(outcome, Completed) and not outcome.is_error
    [evidence] = outcome.evidence
    assert (evidence.kind, evidence.strength) == ("pull_request", Strength.provider_read_back)
    assert (evidence.detail["number"], evidence.detail["head_sha"]) == (2, HEAD_SHA)
    assert json.loads(outcome.output)["url"] == evidence.ref
    assert github.state.pulls_created(REPO) == 1
    assert github.state.requests_to("GET", f"/repos/{REPO}/pulls/2")  # read back


async def test_one_pull_request_when_create_response_is_dropped(github: GitHub) -> None:
    tool = OpenPullRequest(github.client, fixed_repo(REPO))
    github.state.inject("pulls/create", "drop_response")

    started = await tool.start(PR_ARGS, _ctx())
    # The executor's rule after a crash mid-write: reconcile, never start again.
    reconciled = await tool.reconcile(PR_ARGS, _ctx())

    assert github.state.pulls_created(REPO) == 1
    for outcome in (started, reconciled):
        assert isinstance(outcome, Completed) and not outcome.is_error
        [evidence] = outcome.evidence
        assert evidence.strength == Strength.provider_read_back
        assert (evidence.detail["number"], evidence.detail["head_sha"]) == (2, HEAD_SHA)
    assert isinstance(reconciled, Completed)
    assert json.loads(reconciled.output)["found_existing"] is True


async def test_existing_pull_request_returned_when_opened_twice(github: GitHub) -> None:
    tool = OpenPullRequest(github.client, fixed_repo(REPO))

    first = await tool.start(PR_ARGS, _ctx("call-1"))
    second = await tool.start(PR_ARGS, _ctx("call-2"))

    assert isinstance(first, Completed) and isinstance(second, Completed)
    assert first.evidence[0].ref == second.evidence[0].ref
    assert github.state.pulls_created(REPO) == 1


async def test_reconcile_unknown_when_no_pull_request_landed(github: GitHub) -> None:
    tool = OpenPullRequest(github.client, fixed_repo(REPO))

    assert isinstance(await tool.reconcile(PR_ARGS, _ctx()), Unknown)


async def test_retryable_with_retry_after_when_create_is_rate_limited(github: GitHub) -> None:
    tool = OpenPullRequest(github.client, fixed_repo(REPO))
    github.state.inject("pulls/create", "429", retry_after=30)

    with pytest.raises(Retryable) as limited:
        await tool.start(PR_ARGS, _ctx())

    assert limited.value.retry_after_s == 30
    assert github.state.pulls_created(REPO) == 0


# -- wait_for_ci -------------------------------------------------------------------------


async def _wait(github: GitHub) -> tuple[WaitForCi, str]:
    tool = WaitForCi(github.client, fixed_repo(REPO))
    started = await tool.start({"sha": SHA}, _ctx())
    assert started == Started(handle=SHA)
    return tool, SHA


async def test_pending_when_no_checks_reported(github: GitHub) -> None:
    tool, handle = await _wait(github)

    assert isinstance(await tool.poll(handle, _ctx()), Pending)


async def test_pending_when_a_check_is_in_progress(github: GitHub) -> None:
    tool, handle = await _wait(github)
    github.state.set_checks(REPO, SHA, [("test", "success"), ("lint", "in_progress")])

    outcome = await tool.poll(handle, _ctx())

    assert isinstance(outcome, Pending) and "lint" in outcome.detail


async def test_pending_when_a_commit_status_is_pending(github: GitHub) -> None:
    tool, handle = await _wait(github)
    github.state.set_checks(REPO, SHA, [("test", "success")])
    github.state.set_statuses(REPO, SHA, [("deploy/preview", "pending")])

    assert isinstance(await tool.poll(handle, _ctx()), Pending)


async def test_verified_when_all_checks_passed_on_the_sha(github: GitHub) -> None:
    tool, handle = await _wait(github)
    github.state.set_checks(REPO, SHA, [("test", "success"), ("lint", "success")])
    github.state.set_statuses(REPO, SHA, [("ci/legacy", "success")])

    outcome = await tool.poll(handle, _ctx())

    assert isinstance(outcome, Completed) and not outcome.is_error
    [evidence] = outcome.evidence
    assert (evidence.kind, evidence.ref, evidence.strength) == (
        "ci_run",
        f"{REPO}@{SHA}",
        Strength.verified,
    )
    assert {c["name"] for c in evidence.detail["checks"]} == {"test", "lint", "ci/legacy"}


async def test_failure_reported_when_a_check_failed(github: GitHub) -> None:
    tool, handle = await _wait(github)
    github.state.set_checks(REPO, SHA, [("test", "failure"), ("lint", "success")])

    outcome = await tool.poll(handle, _ctx())

    assert isinstance(outcome, Completed) and outcome.is_error
    assert "test (failure)" in outcome.output
    [evidence] = outcome.evidence
    assert evidence.strength == Strength.tool_reported
    assert [c["name"] for c in evidence.detail["failed"]] == ["test"]


async def test_failure_reported_when_a_commit_status_errored(github: GitHub) -> None:
    tool, handle = await _wait(github)
    github.state.set_statuses(REPO, SHA, [("ci/legacy", "error")])

    outcome = await tool.poll(handle, _ctx())

    assert isinstance(outcome, Completed) and outcome.is_error
    assert outcome.evidence[0].strength == Strength.tool_reported


async def test_refused_when_sha_is_not_a_full_sha(github: GitHub) -> None:
    tool = WaitForCi(github.client, fixed_repo(REPO))

    outcome = await tool.start({"sha": "main"}, _ctx())

    assert isinstance(outcome, Completed) and outcome.is_error


# -- comment_on_issue --------------------------------------------------------------------


async def test_comment_carries_call_marker_when_posted(github: GitHub) -> None:
    tool = CommentOnIssue(github.client, fixed_repo(REPO))

    outcome = await tool.start({"number": 1, "text": "Investigating."}, _ctx("call-9"))

    assert isinstance(outcome, Completed) and not outcome.is_error
    [comment] = github.state.repos[REPO].comments.values()
    assert comment.body.endswith(marker("call:call-9"))
    assert outcome.evidence[0].kind == "comment"


async def test_one_comment_when_create_response_is_dropped(github: GitHub) -> None:
    tool = CommentOnIssue(github.client, fixed_repo(REPO))
    github.state.inject("issues/create-comment", "drop_response")

    started = await tool.start({"number": 1, "text": "Investigating."}, _ctx("call-9"))
    reconciled = await tool.reconcile({"number": 1, "text": "Investigating."}, _ctx("call-9"))

    assert github.state.comments_created(REPO) == 1
    for outcome in (started, reconciled):
        assert isinstance(outcome, Completed)
        assert outcome.evidence[0].strength == Strength.provider_read_back


async def test_reconcile_unknown_when_no_comment_carries_the_call(github: GitHub) -> None:
    tool = CommentOnIssue(github.client, fixed_repo(REPO))
    await tool.start({"number": 1, "text": "Investigating."}, _ctx("call-9"))

    outcome = await tool.reconcile({"number": 1, "text": "Investigating."}, _ctx("call-10"))

    assert isinstance(outcome, Unknown)


# -- mentions in what the agent writes ---------------------------------------------------

HOSTILE = "cc @acme/reviewers and @Octocat <!channel>, mail dev@example.com"
# What GitHub would notify: an @handle not broken by an HTML comment or a zero-width space.
_LIVE = re.compile(r"(?<![\w@/`])@([A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9][\w.-]*)?)")


def _live(text: str | None) -> list[str]:
    return _LIVE.findall(text or "")


async def test_comment_pings_nobody_when_the_agent_writes_mentions(github: GitHub) -> None:
    tool = CommentOnIssue(github.client, fixed_repo(REPO))

    outcome = await tool.start({"number": 1, "text": HOSTILE}, _ctx("call-9"))

    assert isinstance(outcome, Completed) and not outcome.is_error
    [comment] = github.state.repos[REPO].comments.values()
    assert _live(comment.body) == []
    assert "@<!-- -->acme/reviewers" in comment.body and "&lt;!channel&gt;" in comment.body
    assert "dev@example.com" in comment.body
    # Reconciling still finds the comment by its marker.
    reconciled = await tool.reconcile({"number": 1, "text": HOSTILE}, _ctx("call-9"))
    assert isinstance(reconciled, Completed)


async def test_comment_keeps_allowed_mentions_live_when_an_allow_list_is_set(
    github: GitHub,
) -> None:
    tool = CommentOnIssue(github.client, fixed_repo(REPO), allowed_mentions=("octocat",))

    await tool.start({"number": 1, "text": HOSTILE}, _ctx("call-9"))

    [comment] = github.state.repos[REPO].comments.values()
    assert _live(comment.body) == ["Octocat"]


async def test_pull_request_title_and_body_ping_nobody_when_the_agent_writes_mentions(
    github: GitHub,
) -> None:
    tool = OpenPullRequest(github.client, fixed_repo(REPO))
    args = {**PR_ARGS, "title": "Fix it @acme/reviewers", "body": HOSTILE}

    outcome = await tool.start(args, _ctx())

    assert isinstance(outcome, Completed) and not outcome.is_error
    [pull] = github.state.repos[REPO].pulls.values()
    assert _live(pull.title) == [] and _live(pull.body) == []
    assert pull.title == "Fix it @\u200bacme/reviewers"


async def test_review_replies_ping_nobody_when_the_agent_writes_mentions(github: GitHub) -> None:
    number = github.state.add_pull(REPO, "Fix", user="alice", head=BRANCH)
    first = github.state.add_review_comment(
        REPO, number, "why?", user="alice", path="a.py", line=1, diff_hunk="@@ -1 +1 @@"
    )
    tool = ReplyToReviewThreads(github.client, fixed_repo(REPO))

    outcome = await tool.start({"number": number, "text": HOSTILE}, _ctx())

    assert isinstance(outcome, Completed) and not outcome.is_error
    [reply] = [c for c in github.state.repos[REPO].review_comments.values() if c.in_reply_to]
    assert reply.in_reply_to == first and _live(reply.body) == []
