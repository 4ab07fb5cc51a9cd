"""``submit_review`` against the GitHub emulator through real PyGithub: one review per head
with inline comments on diff lines, however often it is asked or its response is lost; a
comment off the diff goes back to the model and nothing is posted; a re-review on a new head
answers the fixed thread instead of repeating it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from adapters.config import GitHubConfig
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState, PullFile
from adapters.emulators.server import serve
from adapters.github.client import GitHubClient
from adapters.github.review_since import ReviewSince
from adapters.github.submit_review import SubmitReview
from adapters.github.tools import fixed_repo
from runtime.evidence import Strength
from runtime.tools.base import Completed, Tool, ToolContext, Unknown

TOKEN = "ghp_keel_emulated"
BOT = "keel-bot"
REPO = "acme/widgets"
HEAD = "1111111111111111111111111111111111111111"
NEW_HEAD = "2222222222222222222222222222222222222222"
# calc.py: lines 1-3 context, 4-5 added on the RIGHT; line 4 of the old file removed (LEFT).
_HUNK = "@@ -1,4 +1,5 @@\n def add(a, b):\n     return a + b\n \n-def sub(a, b):\n+def sub(a, b):\n"
PATCH = _HUNK + "+    return a - a\n"
FIXED_PATCH = _HUNK + "+    return a - b\n"
FINDING = {"path": "calc.py", "line": 5, "side": "RIGHT", "body": "This subtracts a from a."}
ARGS: dict[str, Any] = {
    "number": 1,
    "event": "REQUEST_CHANGES",
    "body": "One bug in sub().",
    "comments": [FINDING],
}


@dataclass(frozen=True, slots=True)
class GitHub:
    state: GitHubState
    client: GitHubClient
    tool: SubmitReview


@pytest.fixture
def github() -> Iterator[GitHub]:
    state = GitHubState()
    state.add_token(TOKEN, BOT)
    state.add_repo(REPO)
    state.set_branch(REPO, "feature", HEAD)
    files = (PullFile("calc.py", "modified", 2, 1, PATCH),)
    state.add_pull(REPO, "Add sub", user="alice", head="feature", files=files)
    with serve(create_github_app(state)) as server:
        client = GitHubClient.from_config(
            GitHubConfig(token=TOKEN, api_url=server.url), timeout_s=5
        )
        yield GitHub(state, client, SubmitReview(client, fixed_repo(REPO), bot_login=BOT))


def _ctx(call_id: str = "call-1") -> ToolContext:
    return ToolContext(task_id="task-7", root_task_id="task-7", call_id=call_id)


def _done(outcome: object) -> dict[str, Any]:
    assert isinstance(outcome, Completed) and not outcome.is_error, outcome
    found: dict[str, Any] = json.loads(outcome.output)
    return found


def _comments_of(github: GitHub, review_id: int) -> list[tuple[str, int, str]]:
    repo = github.state.repos[REPO]
    return [
        (c.path, c.line, c.side) for c in repo.review_comments.values() if c.review_id == review_id
    ]


def test_submit_review_satisfies_the_tool_port_when_built(github: GitHub) -> None:
    assert isinstance(github.tool, Tool)


async def test_one_review_with_inline_comments_when_submitted_twice_on_one_head(
    github: GitHub,
) -> None:
    first = _done(await github.tool.start(ARGS, _ctx("call-1")))
    # A redelivered request runs a second call on the same head: it finds the first review.
    second = _done(await github.tool.start(ARGS, _ctx("call-2")))

    [review] = github.state.reviews_of(REPO, 1)
    assert (review.state, review.commit_id) == ("CHANGES_REQUESTED", HEAD)
    assert _comments_of(github, review.review_id) == [("calc.py", 5, "RIGHT")]
    assert first["review_id"] == second["review_id"] == review.review_id
    assert (first["found_existing"], second["found_existing"]) == (False, True)


async def test_evidence_is_the_review_read_back_when_posted(github: GitHub) -> None:
    outcome = await github.tool.start(ARGS, _ctx())

    assert isinstance(outcome, Completed)
    [evidence] = outcome.evidence
    assert (evidence.kind, evidence.strength) == ("read_back", Strength.provider_read_back)
    assert (evidence.detail["sha"], evidence.detail["comments"]) == (HEAD, 1)
    [review] = github.state.reviews_of(REPO, 1)
    assert github.state.requests_to(
        "GET", f"/repos/{REPO}/pulls/1/reviews/{review.review_id}/comments"
    )


async def test_one_review_when_the_create_response_is_lost(github: GitHub) -> None:
    github.state.inject("pulls/create-review", "drop_response")

    started = _done(await github.tool.start(ARGS, _ctx()))
    # After a crash the executor reconciles the call; it must find the same review.
    reconciled = _done(await github.tool.reconcile(ARGS, _ctx()))

    [review] = github.state.reviews_of(REPO, 1)
    assert started["review_id"] == reconciled["review_id"] == review.review_id
    assert len(_comments_of(github, review.review_id)) == 1


async def test_reconcile_unknown_when_no_review_landed(github: GitHub) -> None:
    assert isinstance(await github.tool.reconcile(ARGS, _ctx()), Unknown)


@pytest.mark.parametrize(
    ("comment", "said"),
    [
        ({"path": "calc.py", "line": 40, "body": "far away"}, "lines on the RIGHT side: 1-5"),
        ({"path": "calc.py", "line": 5, "side": "LEFT", "body": "old"}, "LEFT side: 1-4"),
        ({"path": "README.md", "line": 1, "body": "untouched"}, "not a file this pull"),
        ({"path": "calc.py", "line": 0, "body": "zero"}, "a line from 1"),
    ],
)
async def test_nothing_posted_and_the_model_told_when_a_comment_is_off_the_diff(
    github: GitHub, comment: dict[str, Any], said: str
) -> None:
    args = ARGS | {"comments": [FINDING, comment]}

    outcome = await github.tool.start(args, _ctx())

    assert isinstance(outcome, Completed) and outcome.is_error
    assert said in outcome.output
    assert github.state.reviews_of(REPO, 1) == []
    assert not github.state.requests_to("POST", f"/repos/{REPO}/pulls/1/reviews")


async def test_emulator_refuses_the_whole_review_when_a_comment_is_off_the_diff(
    github: GitHub,
) -> None:
    """What GitHub does when Keel's own check is bypassed: 422, no review, no comment."""
    from adapters.github.reviews import InlineComment, create_review
    from runtime.errors import Permanent

    with pytest.raises(Permanent, match="must be part of the diff"):
        await create_review(
            github.client,
            REPO,
            1,
            commit_id=HEAD,
            event="COMMENT",
            body="x",
            comments=[InlineComment("calc.py", 40, "RIGHT", "off the diff")],
        )

    assert github.state.reviews_of(REPO, 1) == []
    assert github.state.repos[REPO].review_comments == {}


async def test_approve_refused_when_the_operator_has_not_allowed_it(github: GitHub) -> None:
    outcome = await github.tool.start(ARGS | {"event": "APPROVE"}, _ctx())

    assert isinstance(outcome, Completed) and outcome.is_error
    assert github.state.reviews_of(REPO, 1) == []


async def test_review_since_gives_the_last_review_its_threads_and_the_new_diff(
    github: GitHub,
) -> None:
    since = ReviewSince(github.client, fixed_repo(REPO), bot_login=BOT)
    before = _done(await since.start({"number": 1}, _ctx("read-0")))
    first = _done(await github.tool.start(ARGS, _ctx("call-1")))
    _push_the_fix(github)

    after = _done(await since.start({"number": 1}, _ctx("read-1")))

    assert before == {"head_sha": HEAD, "previous_review": None}
    assert after["head_sha"] == NEW_HEAD
    assert after["previous_review"]["head_sha"] == HEAD
    [thread] = after["threads"]
    assert thread["comment_id"] == _comments_of_ids(github, first["review_id"])[0]
    assert (thread["path"], thread["line"], thread["answered"]) == ("calc.py", 5, False)
    assert "+    return a - b" in after["diff_since"]


def _push_the_fix(github: GitHub) -> None:
    fixed = (PullFile("calc.py", "modified", 2, 1, FIXED_PATCH),)
    change = PullFile(
        "calc.py", "modified", 1, 1, "@@ -5 +5 @@\n-    return a - a\n+    return a - b\n"
    )
    github.state.push_to_pull(REPO, 1, NEW_HEAD, fixed, changed=(change,))


async def test_re_review_answers_the_fixed_thread_once_when_the_head_moves(
    github: GitHub,
) -> None:
    first = _done(await github.tool.start(ARGS, _ctx("call-1")))
    [finding] = _comments_of_ids(github, first["review_id"])
    _push_the_fix(github)
    again = {
        "number": 1,
        "event": "COMMENT",
        "body": "Since the last review: sub() is fixed.",
        "replies": [{"comment_id": finding, "body": "Fixed.", "fixed": True}],
    }

    second = _done(await github.tool.start(again, _ctx("call-2")))
    _done(await github.tool.reconcile(again, _ctx("call-2")))  # a retry replies no more

    assert len(github.state.reviews_of(REPO, 1)) == 2
    assert (second["head_sha"], second["comments"], second["replied"]) == (NEW_HEAD, 0, [finding])
    replies = [
        c for c in github.state.repos[REPO].review_comments.values() if c.in_reply_to == finding
    ]
    assert len(replies) == 1 and f"Fixed in {NEW_HEAD}." in replies[0].body


async def test_a_marker_pasted_into_someone_elses_review_does_not_count(github: GitHub) -> None:
    """A person cannot suppress Keel's review by pasting its marker into their own."""
    from adapters.github.submit_review import review_key
    from adapters.github.surface import marker

    fake = github.state.repos[REPO]
    from adapters.emulators.github_state import Review

    fake.reviews[1] = Review(
        1,
        1,
        marker(review_key(REPO, 1, HEAD)),
        "COMMENTED",
        github.state.add_user("mallory"),
        HEAD,
        0.0,
    )

    posted = _done(await github.tool.start(ARGS, _ctx()))

    assert posted["found_existing"] is False
    assert len(github.state.reviews_of(REPO, 1)) == 2


def _comments_of_ids(github: GitHub, review_id: int) -> list[int]:
    repo = github.state.repos[REPO]
    return [c.comment_id for c in repo.review_comments.values() if c.review_id == review_id]
