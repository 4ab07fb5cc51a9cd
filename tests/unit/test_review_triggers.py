"""Review requests on GitHub → Signals, and the agent a review task runs as.

Payloads are the octokit webhook examples of the corpus, edited where the case needs it: a
review requested from the bot, ``@keel review`` on a pull request, a push to a repository
with ``review.auto``. One review request per (pull request, head), whichever event asks.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.emulators.corpus import load_github_example
from adapters.github.signals import GitHubIdentity, signal_from_github
from routing.reviews import agent_for
from routing.signal import Ignored, Signal
from runtime.config import AutoReview
from runtime.threads import GitHubIssue

NOW = datetime(2026, 12, 8, tzinfo=UTC)
US = GitHubIdentity(bot_login="keel-bot")
REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
AUTO = (AutoReview(repo="codertocat/*"),)


def _translate(
    event: str, payload: dict[str, Any], auto: tuple[AutoReview, ...] = ()
) -> Signal | Ignored:
    return signal_from_github(event, "guid-1", payload, US, received_at=NOW, auto_review=auto)


def _requested(login: str) -> dict[str, Any]:
    return load_github_example(
        "pull_request/review_requested", **{"requested_reviewer.login": login}
    )


def test_review_requested_from_the_bot_asks_for_a_review_of_its_head() -> None:
    found = _translate("pull_request", _requested("keel-bot"))

    assert isinstance(found, Signal) and found.addresses_bot
    assert found.text.startswith("Review pull request #2.")
    assert found.thread_ref == GitHubIssue(REPO, 2)
    assert found.dedupe_key == f"github:review:{REPO}#2@{HEAD}"


@pytest.mark.parametrize("payload", [_requested("octocat"), _requested("keel-bot-2")])
def test_review_requested_from_someone_else_is_not_addressed(payload: dict[str, Any]) -> None:
    found = _translate("pull_request", payload)

    assert isinstance(found, Ignored) and found.reason == "not_addressed"


def test_a_team_review_request_is_not_addressed_to_the_bot() -> None:
    payload = _requested("keel-bot")
    del payload["requested_reviewer"]
    payload["requested_team"] = {"name": "reviewers", "id": 1}

    assert isinstance(_translate("pull_request", payload), Ignored)


def test_a_push_and_a_review_request_on_one_head_are_one_fact() -> None:
    pushed = _translate("pull_request", load_github_example("pull_request/synchronize"), AUTO)
    requested = _translate("pull_request", _requested("keel-bot"))

    assert isinstance(pushed, Signal) and isinstance(requested, Signal)
    assert pushed.dedupe_key == requested.dedupe_key


@pytest.mark.parametrize(
    ("action", "auto", "draft", "reviewed"),
    [
        ("synchronize", AUTO, False, True),
        ("synchronize", (), False, False),
        ("synchronize", (AutoReview(repo="someone/else"),), False, False),
        ("synchronize", AUTO, True, False),
        ("synchronize", (AutoReview(repo="codertocat/*", drafts=True),), True, True),
        ("synchronize", (AutoReview(repo="codertocat/*", on=("opened",)),), False, False),
        ("ready_for_review", AUTO, False, True),
        ("opened", AUTO, False, True),
        ("opened", (), False, False),
    ],
)
def test_automatic_review_follows_the_repository_setting(
    action: str, auto: tuple[AutoReview, ...], draft: bool, reviewed: bool
) -> None:
    payload = load_github_example(f"pull_request/{action}", **{"pull_request.draft": draft})

    found = _translate("pull_request", payload, auto)

    is_review = isinstance(found, Signal) and found.text.startswith("Review pull request #")
    assert is_review == reviewed, found


@pytest.mark.parametrize("association", ["CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "NONE"])
def test_an_outsiders_pull_request_is_not_reviewed_unasked(association: str) -> None:
    payload = load_github_example(
        "pull_request/synchronize", **{"pull_request.author_association": association}
    )

    found = _translate("pull_request", payload, AUTO)

    assert isinstance(found, Ignored) and found.reason == "not_addressed"


def test_keel_review_on_a_pull_request_is_a_review_request() -> None:
    payload = load_github_example(
        "issue_comment/created",
        **{"comment.body": "@keel-bot review, focus on errors", "issue.pull_request": {"url": "x"}},
    )

    found = signal_from_github(
        "issue_comment", "g", payload, US, received_at=NOW, trigger="@keel-bot"
    )

    assert isinstance(found, Signal)
    assert found.text == "Review pull request #1. focus on errors"


def test_keel_review_on_a_plain_issue_stays_as_written() -> None:
    payload = load_github_example("issue_comment/created", **{"comment.body": "@keel-bot review"})

    found = signal_from_github(
        "issue_comment", "g", payload, US, received_at=NOW, trigger="@keel-bot"
    )

    assert isinstance(found, Signal) and found.text == "review"


PULL = GitHubIssue(REPO, 2)


@pytest.mark.parametrize(
    ("text", "thread", "agent"),
    [
        ("Review pull request #2.", PULL, "review"),
        ("Review pull request #2. (review requested; head y)", PULL, "review"),
        ("Review pull request #2. and fix the typos", PULL, "coder"),
        ("Review pull request #2. then push a fix", PULL, "coder"),
        ("Review pull request #2. but don't fix anything", PULL, "review"),
        ("Review pull request #2. (pushed to; head fix)", PULL, "review"),
        ("review the docs", PULL, "coder"),
        ("Review pull request #2.", None, "coder"),
    ],
)
def test_review_requests_run_as_the_read_only_review_agent(
    text: str, thread: GitHubIssue | None, agent: str
) -> None:
    assert agent_for(text, thread, "coder") == agent


def test_a_posted_review_is_one_evidence_row_with_its_head_and_comment_count() -> None:
    from runtime.evidence import EvidenceItem, Strength
    from runtime.reporting import describe_evidence

    url = "https://github.com/acme/shop/pull/1#pullrequestreview-9"
    detail = {"review_id": 9, "sha": HEAD, "comments": 2, "number": 1, "repo": "acme/shop"}
    item = EvidenceItem("read_back", url, Strength.provider_read_back, detail)

    assert describe_evidence(item) == f"Review read back on {HEAD[:7]}: 2 comments — {url}"
