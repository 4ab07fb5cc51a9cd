"""The GitHub emulator's pull request reviews on the wire, checked against GitHub's REST
description: create one with inline comments (or be refused whole with GitHub's 422), list
them, list one review's comments."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from adapters.emulators.contract import GitHubContract, load_github_contract
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState, PullFile
from adapters.emulators.server import serve
from tests.fixtures import GITHUB_OPENAPI

TOKEN = "ghp_keel_emulated"
REPO = "acme/widgets"
REVIEWS = "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"
PATCH = "@@ -1,2 +1,3 @@\n a = 1\n-b = 2\n+b = 3\n+c = 4\n"


@dataclass(frozen=True, slots=True)
class GitHub:
    state: GitHubState
    url: str

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"token {TOKEN}"}
        return httpx.request(method, f"{self.url}{path}", headers=headers, **kwargs)


@pytest.fixture(scope="module")
def contract() -> GitHubContract:
    return load_github_contract(GITHUB_OPENAPI)


@pytest.fixture
def github() -> Iterator[GitHub]:
    state = GitHubState()
    state.add_token(TOKEN, "keel-bot")
    state.add_repo(REPO)
    files = (PullFile("app.py", "modified", 2, 1, PATCH),)
    state.add_pull(REPO, "Change b", user="alice", head="feature", files=files)
    with serve(create_github_app(state)) as server:
        yield GitHub(state, server.url)


def _review(**overrides: Any) -> dict[str, Any]:
    comment = {"path": "app.py", "line": 3, "side": "RIGHT", "body": "why c?"}
    return {"event": "COMMENT", "body": "Looks fine.", "comments": [comment]} | overrides


def test_review_with_inline_comments_matches_spec_when_created_and_listed(
    github: GitHub, contract: GitHubContract
) -> None:
    created = github.call("POST", f"/repos/{REPO}/pulls/1/reviews", json=_review())

    assert created.status_code == 200
    contract.validate(REVIEWS, "post", 200, created.json())
    assert created.json()["state"] == "COMMENTED"
    listed = github.call("GET", f"/repos/{REPO}/pulls/1/reviews")
    contract.validate(REVIEWS, "get", 200, listed.json())
    review_id = created.json()["id"]
    comments = github.call("GET", f"/repos/{REPO}/pulls/1/reviews/{review_id}/comments")
    contract.validate(REVIEWS + "/{review_id}/comments", "get", 200, comments.json())
    [comment] = comments.json()
    assert (comment["path"], comment["line"], comment["side"]) == ("app.py", 3, "RIGHT")
    assert comment["pull_request_review_id"] == review_id


@pytest.mark.parametrize(
    ("comment", "error"),
    [
        ({"path": "app.py", "line": 9, "body": "x"}, "must be part of the diff"),
        ({"path": "app.py", "line": 2, "side": "LEFT", "body": "x"}, None),
        ({"path": "app.py", "line": 3, "side": "LEFT", "body": "x"}, "must be part of the diff"),
        ({"path": "other.py", "line": 1, "body": "x"}, "Path could not be resolved"),
    ],
)
def test_review_refused_whole_with_422_when_a_comment_is_off_the_diff(
    github: GitHub, comment: dict[str, Any], error: str | None
) -> None:
    answer = github.call("POST", f"/repos/{REPO}/pulls/1/reviews", json=_review(comments=[comment]))

    if error is None:  # a removed line, on the old side: on the diff
        assert answer.status_code == 200
        return
    assert answer.status_code == 422
    assert answer.json()["message"] == "Unprocessable Entity"
    assert any(error in e for e in answer.json()["errors"])
    assert github.state.reviews_of(REPO, 1) == []
    assert github.state.repos[REPO].review_comments == {}


def test_approve_refused_when_the_author_approves_their_own_pull(github: GitHub) -> None:
    github.state.add_token("ghp_alice", "alice")

    answer = httpx.post(
        f"{github.url}/repos/{REPO}/pulls/1/reviews",
        headers={"Authorization": "token ghp_alice"},
        json=_review(event="APPROVE", comments=[]),
    )

    assert answer.status_code == 422
    assert "Can not approve your own pull request" in answer.json()["errors"]


def test_compare_of_two_heads_matches_spec_when_pushed(
    github: GitHub, contract: GitHubContract
) -> None:
    old_head = github.state.repos[REPO].pulls[1].head_sha
    new_head = "3" * 40
    fix = PullFile("app.py", "modified", 1, 1, "@@ -3 +3 @@\n-c = 4\n+c = 5\n")
    github.state.push_to_pull(REPO, 1, new_head, (fix,), changed=(fix,))

    compared = github.call("GET", f"/repos/{REPO}/compare/{old_head}...{new_head}")
    unknown = github.call("GET", f"/repos/{REPO}/compare/{new_head}...{old_head}")

    assert compared.status_code == 200
    contract.validate("/repos/{owner}/{repo}/compare/{basehead}", "get", 200, compared.json())
    assert [f["filename"] for f in compared.json()["files"]] == ["app.py"]
    assert unknown.status_code == 404
