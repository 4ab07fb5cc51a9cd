"""The GitHub emulator driven by the real PyGithub over loopback sockets, its responses
checked against GitHub's REST description (trimmed to what is checked, in tests/fixtures)."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest
import requests
from fastapi import FastAPI, Request
from github import Auth, BadCredentialsException, Github, GithubException, GithubIntegration

from adapters.emulators.contract import GitHubContract, load_github_contract
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState, PullFile
from adapters.emulators.server import serve
from adapters.emulators.webhooks import (
    deliver_github_event,
    github_signature,
    load_github_example,
    sign_github,
)
from tests.factories import app_key_pair
from tests.fixtures import GITHUB_OPENAPI

TOKEN = "ghp_keel_emulated"
REPO = "acme/widgets"
SHA = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True, slots=True)
class GitHub:
    state: GitHubState
    url: str

    def client(self, **options: Any) -> Github:
        options.setdefault("retry", None)
        options.setdefault("auth", Auth.Token(TOKEN))
        # PyGithub spaces requests by 0.25 s and writes by 1 s; the emulator needs neither.
        options.setdefault("seconds_between_requests", None)
        options.setdefault("seconds_between_writes", None)
        return Github(base_url=self.url, **options)

    def installation_auth(self, private_key: str) -> Auth.AppInstallationAuth:
        app = Auth.AppAuth(self.state.app_id, private_key)
        return app.get_installation_auth(self.state.installation_id)

    def raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The wire JSON, for checking it against the description."""
        headers = {"Authorization": f"token {TOKEN}"}
        return httpx.request(method, f"{self.url}{path}", headers=headers, **kwargs)


@pytest.fixture(scope="module")
def contract() -> GitHubContract:
    return load_github_contract(GITHUB_OPENAPI)


@pytest.fixture(scope="module")
def app_key() -> tuple[str, str]:
    return app_key_pair()


@pytest.fixture
def github(app_key: tuple[str, str]) -> Iterator[GitHub]:
    state = GitHubState(app_public_key=app_key[1])
    state.add_token(TOKEN, "keel-bot")
    state.add_repo(REPO)
    state.add_issue(REPO, "Build is red", "Please fix CI", user="alice", labels=("bug",))
    state.set_permission(REPO, "alice", "write")
    with serve(create_github_app(state)) as server:
        yield GitHub(state, server.url)


def test_create_comment_matches_spec_when_posted(github: GitHub, contract: GitHubContract) -> None:
    issue = github.client().get_repo(REPO).get_issue(1)

    comment = issue.create_comment("Working on it <!-- keel:call=c1 -->")
    wire = github.raw("POST", f"/repos/{REPO}/issues/1/comments", json={"body": "second"})

    contract.validate(
        "/repos/{owner}/{repo}/issues/{issue_number}/comments", "post", 201, wire.json()
    )
    assert comment.user.login == "keel-bot"
    assert github.state.comments_created(REPO) == 2
    assert [c.body for c in issue.get_comments()] == [
        "Working on it <!-- keel:call=c1 -->",
        "second",
    ]


def test_issue_and_repo_match_spec_when_read(github: GitHub, contract: GitHubContract) -> None:
    issue = github.client().get_repo(REPO).get_issue(1)

    contract.validate(
        "/repos/{owner}/{repo}/issues/{issue_number}",
        "get",
        200,
        github.raw("GET", f"/repos/{REPO}/issues/1").json(),
    )
    contract.validate(
        "/repos/{owner}/{repo}", "get", 200, github.raw("GET", f"/repos/{REPO}").json()
    )
    assert (issue.title, [label.name for label in issue.labels]) == ("Build is red", ["bug"])


def test_edit_comment_updates_body_when_patched(github: GitHub, contract: GitHubContract) -> None:
    comment = github.client().get_repo(REPO).get_issue(1).create_comment("Progress: 1/3")

    comment.edit("Progress: 2/3")

    stored = github.state.repos[REPO].comments[comment.id]
    assert (stored.body, comment.body) == ("Progress: 2/3", "Progress: 2/3")
    wire = github.raw("PATCH", f"/repos/{REPO}/issues/comments/{comment.id}", json={"body": "3/3"})
    contract.validate(
        "/repos/{owner}/{repo}/issues/comments/{comment_id}", "patch", 200, wire.json()
    )


def test_reaction_created_then_returned_when_repeated(
    github: GitHub, contract: GitHubContract
) -> None:
    issue = github.client().get_repo(REPO).get_issue(1)
    comment = issue.create_comment("hi")

    issue.create_reaction("eyes")
    first = github.raw(
        "POST", f"/repos/{REPO}/issues/comments/{comment.id}/reactions", json={"content": "rocket"}
    )
    again = github.raw(
        "POST", f"/repos/{REPO}/issues/comments/{comment.id}/reactions", json={"content": "rocket"}
    )

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    contract.validate(
        "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions", "post", 201, first.json()
    )
    assert len(github.state.repos[REPO].reactions) == 2


def test_pull_matches_spec_when_created_then_read(github: GitHub, contract: GitHubContract) -> None:
    repo = github.client().get_repo(REPO)

    created = repo.create_pull(base="main", head="keel/fix-ci", title="Fix CI", body="Closes #1")
    read_back = repo.get_pull(created.number)

    contract.validate(
        "/repos/{owner}/{repo}/pulls/{pull_number}",
        "get",
        200,
        github.raw("GET", f"/repos/{REPO}/pulls/{created.number}").json(),
    )
    assert (read_back.head.ref, read_back.base.ref, read_back.state) == (
        "keel/fix-ci",
        "main",
        "open",
    )
    assert created.number == 2  # issues and pulls share one number sequence
    assert github.state.pulls_created(REPO) == 1


def test_create_pull_matches_spec_when_posted_raw(github: GitHub, contract: GitHubContract) -> None:
    wire = github.raw(
        "POST", f"/repos/{REPO}/pulls", json={"title": "T", "head": "acme:keel/t", "base": "main"}
    )

    assert wire.status_code == 201
    contract.validate("/repos/{owner}/{repo}/pulls", "post", 201, wire.json())
    assert wire.headers["Location"] == wire.json()["url"]


@pytest.mark.parametrize(
    ("operation_path", "path"),
    [
        ("/user", "/user"),
        ("/repos/{owner}/{repo}/commits/{ref}", f"/repos/{REPO}/commits/{SHA}"),
        ("/repos/{owner}/{repo}/issues/{issue_number}", f"/repos/{REPO}/issues/2"),
    ],
)
def test_other_reads_match_spec_when_fetched(
    github: GitHub, contract: GitHubContract, operation_path: str, path: str
) -> None:
    github.client().get_repo(REPO).create_pull(base="main", head="keel/pr", title="PR as issue")

    wire = github.raw("GET", path)

    assert wire.status_code == 200
    contract.validate(operation_path, "get", 200, wire.json())


def test_list_pulls_matches_spec_and_filters_when_head_is_given(
    github: GitHub, contract: GitHubContract
) -> None:
    repo = github.client().get_repo(REPO)
    repo.create_pull(base="main", head="keel/one", title="One")
    two = repo.create_pull(base="main", head="keel/two", title="Two")

    found = repo.get_pulls(state="open", head="acme:keel/two")
    wire = github.raw("GET", f"/repos/{REPO}/pulls", params={"head": "acme:keel/two"})

    contract.validate("/repos/{owner}/{repo}/pulls", "get", 200, wire.json())
    assert [p.number for p in found] == [two.number]
    assert list(repo.get_pulls(head="someone-else:keel/two")) == []
    assert list(repo.get_pulls(state="closed")) == []


def test_create_pull_fails_422_when_open_pull_exists_for_head(github: GitHub) -> None:
    repo = github.client().get_repo(REPO)
    repo.create_pull(base="main", head="keel/fix", title="Fix")

    with pytest.raises(GithubException) as raised:
        repo.create_pull(base="main", head="keel/fix", title="Fix again")

    assert raised.value.status == 422
    assert "already exists" in raised.value.data["errors"][0]["message"]
    assert github.state.pulls_created(REPO) == 1


def test_check_runs_match_spec_when_checks_are_set(
    github: GitHub, contract: GitHubContract
) -> None:
    github.state.set_checks(REPO, SHA, [("test", "success"), ("lint", "in_progress")])

    runs = github.client().get_repo(REPO).get_commit(SHA).get_check_runs()
    wire = github.raw("GET", f"/repos/{REPO}/commits/{SHA}/check-runs")

    contract.validate("/repos/{owner}/{repo}/commits/{ref}/check-runs", "get", 200, wire.json())
    assert [(r.name, r.status, r.conclusion) for r in runs] == [
        ("test", "completed", "success"),
        ("lint", "in_progress", None),
    ]
    assert {r.head_sha for r in runs} == {SHA}


def test_combined_status_matches_spec_when_statuses_are_set(
    github: GitHub, contract: GitHubContract
) -> None:
    github.state.set_statuses(REPO, SHA, [("ci/build", "success"), ("ci/deploy", "failure")])

    combined = github.client().get_repo(REPO).get_commit(SHA).get_combined_status()
    wire = github.raw("GET", f"/repos/{REPO}/commits/{SHA}/status")

    contract.validate("/repos/{owner}/{repo}/commits/{ref}/status", "get", 200, wire.json())
    assert (combined.state, combined.total_count) == ("failure", 2)


def test_combined_status_is_pending_when_sha_has_no_statuses(github: GitHub) -> None:
    combined = github.client().get_repo(REPO).get_commit(SHA).get_combined_status()

    assert (combined.state, combined.total_count) == ("pending", 0)


def test_collaborator_permission_matches_spec_when_seeded(
    github: GitHub, contract: GitHubContract
) -> None:
    github.state.add_user("mallory")
    repo = github.client().get_repo(REPO)

    wire = github.raw("GET", f"/repos/{REPO}/collaborators/alice/permission")

    contract.validate(
        "/repos/{owner}/{repo}/collaborators/{username}/permission", "get", 200, wire.json()
    )
    assert repo.get_collaborator_permission("alice") == "write"
    assert repo.get_collaborator_permission("mallory") == "none"
    assert repo.get_collaborator_permission("acme") == "admin"


def test_collaborator_permission_404_when_user_does_not_exist(github: GitHub) -> None:
    with pytest.raises(GithubException) as raised:
        github.client().get_repo(REPO).get_collaborator_permission("ghost")

    assert raised.value.status == 404


def test_comments_paginate_with_link_header_when_more_than_a_page(github: GitHub) -> None:
    for n in range(35):
        github.state.add_comment(REPO, 1, f"comment {n}", user="alice")
    issue = github.client().get_repo(REPO).get_issue(1)

    bodies = [c.body for c in issue.get_comments()]

    assert bodies == [f"comment {n}" for n in range(35)]
    pages = github.state.requests_to("GET", f"/repos/{REPO}/issues/1/comments")
    assert len(pages) == 2


def test_bad_credentials_401_when_token_is_unknown(github: GitHub) -> None:
    client = github.client(auth=Auth.Token("ghp_wrong"))

    with pytest.raises(BadCredentialsException) as raised:
        client.get_repo(REPO)

    assert raised.value.data["message"] == "Bad credentials"


def test_installation_token_matches_spec_when_app_jwt_is_valid(
    github: GitHub, contract: GitHubContract, app_key: tuple[str, str]
) -> None:
    jwt_token = Auth.AppAuth(github.state.app_id, app_key[0]).create_jwt()

    wire = httpx.post(
        f"{github.url}/app/installations/{github.state.installation_id}/access_tokens",
        headers={"Authorization": f"Bearer {jwt_token}"},
        json={},
    )

    assert wire.status_code == 201
    contract.validate(
        "/app/installations/{installation_id}/access_tokens", "post", 201, wire.json()
    )
    assert wire.json()["token"] in github.state.tokens


def test_installation_token_refused_401_when_jwt_signed_by_another_key(github: GitHub) -> None:
    other, _ = app_key_pair()

    with pytest.raises(GithubException) as raised:
        github.client(auth=github.installation_auth(other)).get_repo(REPO)

    assert raised.value.status == 401
    assert not any(t.installation_id for t in github.state.tokens.values())


def test_app_installation_auth_acts_as_bot_when_token_is_issued(
    github: GitHub, app_key: tuple[str, str]
) -> None:
    client = github.client(auth=github.installation_auth(app_key[0]))
    app_auth = Auth.AppAuth(github.state.app_id, app_key[0])

    comment = client.get_repo(REPO).get_issue(1).create_comment("from the app")

    assert comment.user.login == "keel[bot]"
    assert GithubIntegration(base_url=github.url, auth=app_auth).get_app().slug == "keel"


def test_pygithub_refreshes_token_when_issued_token_is_near_expiry(
    github: GitHub, app_key: tuple[str, str]
) -> None:
    github.state.token_ttl_s = 5  # inside PyGithub's 20 s refresh threshold
    repo = github.client(auth=github.installation_auth(app_key[0])).get_repo(REPO)

    repo.get_issue(1)
    repo.get_issue(1)

    token_path = f"/app/installations/{github.state.installation_id}/access_tokens"
    assert len(github.state.requests_to("POST", token_path)) >= 2


def test_expired_token_gets_401_when_test_expires_it(
    github: GitHub, app_key: tuple[str, str]
) -> None:
    repo = github.client(auth=github.installation_auth(app_key[0])).get_repo(REPO)

    github.state.expire_token()

    with pytest.raises(BadCredentialsException):
        repo.get_issue(1)
    fresh = github.client(auth=github.installation_auth(app_key[0]))
    assert fresh.get_repo(REPO).get_issue(1).number == 1


def test_comment_lands_but_client_errors_when_response_dropped(github: GitHub) -> None:
    issue = github.client().get_repo(REPO).get_issue(1)
    github.state.inject("issues/create-comment", "drop_response")

    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        issue.create_comment("lost <!-- keel:call=c7 -->")

    assert github.state.comments_created(REPO) == 1
    assert [c.body for c in issue.get_comments()] == ["lost <!-- keel:call=c7 -->"]


def test_pull_found_by_head_when_create_response_dropped(github: GitHub) -> None:
    repo = github.client().get_repo(REPO)
    github.state.inject("POST /repos/acme/widgets/pulls", "drop_response")

    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        repo.create_pull(base="main", head="keel/task-9", title="Task 9")

    assert [p.title for p in repo.get_pulls(state="all", head="acme:keel/task-9")] == ["Task 9"]
    assert github.state.pulls_created(REPO) == 1


def test_rate_limited_429_with_retry_after_when_429_injected(github: GitHub) -> None:
    repo = github.client().get_repo(REPO)
    github.state.inject("pulls/create", "429", retry_after=30)

    with pytest.raises(GithubException) as raised:
        repo.create_pull(base="main", head="keel/x", title="X")

    assert raised.value.status == 429
    assert raised.value.headers is not None and raised.value.headers["retry-after"] == "30"
    assert github.state.pulls_created(REPO) == 0


def test_server_error_500_when_500_injected(github: GitHub) -> None:
    repo = github.client().get_repo(REPO)
    github.state.inject("issues/get", "500", times=2)

    for _ in range(2):
        with pytest.raises(GithubException) as raised:
            repo.get_issue(1)
        assert raised.value.status == 500
    assert repo.get_issue(1).number == 1


def test_client_times_out_and_write_lands_late_when_timeout_injected(github: GitHub) -> None:
    issue = github.client(timeout=1).get_repo(REPO).get_issue(1)  # PyGithub takes whole seconds
    github.state.inject("issues/create-comment", "timeout", delay_s=1.3)

    with pytest.raises(requests.exceptions.Timeout):
        issue.create_comment("slow")

    deadline = time.monotonic() + 3
    while github.state.comments_created(REPO) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert github.state.comments_created(REPO) == 1


def test_requests_recorded_without_authorization_when_called(github: GitHub) -> None:
    github.client().get_repo(REPO).get_issue(1).create_comment("recorded")

    recorded = github.state.requests_to("POST", f"/repos/{REPO}/issues/1/comments")
    assert [r.body for r in recorded] == [{"body": "recorded"}]
    assert "authorization" not in recorded[0].headers


def test_contract_rejects_response_when_it_breaks_the_schema(contract: GitHubContract) -> None:
    with pytest.raises(jsonschema.ValidationError):
        contract.validate("/repos/{owner}/{repo}/pulls/{pull_number}", "get", 200, {"id": 1})


def test_github_signature_matches_githubs_documented_example() -> None:
    # The test vector from GitHub's "Validating webhook deliveries" documentation.
    signature = github_signature("It's a Secret to Everybody", b"Hello, World!")

    assert signature == ("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")


async def test_deliver_repeats_one_delivery_id_when_delivered_five_times() -> None:
    received: list[tuple[dict[str, str], bytes]] = []
    receiver = FastAPI()

    @receiver.post("/github/webhook")
    async def webhook(request: Request) -> dict[str, bool]:
        received.append((dict(request.headers), await request.body()))
        return {"ok": True}

    payload = load_github_example("issue_comment/created", **{"comment.body": "@keel fix it"})
    with serve(receiver) as server:
        await deliver_github_event(
            f"{server.url}/github/webhook",
            "issue_comment",
            payload,
            "hook-secret",
            times=5,
            concurrently=True,
        )

    assert len(received) == 5
    assert len({headers["x-github-delivery"] for headers, _ in received}) == 1
    for headers, body in received:
        expected = "sha256=" + hmac.new(b"hook-secret", body, hashlib.sha256).hexdigest()
        assert headers["x-hub-signature-256"] == expected
        assert headers["x-github-event"] == "issue_comment"
        assert b"@keel fix it" in body


def test_signed_delivery_carries_given_delivery_id_when_redelivered() -> None:
    first = sign_github("ping", load_github_example("ping/ping"), "s", delivery_id="d-1")

    assert first.headers["X-GitHub-Delivery"] == "d-1"


# -- what the task brief reads ----------------------------------------------------------------


def _pull_with_review(github: GitHub) -> tuple[int, int, int]:
    state = github.state
    hunk = "@@ -1,2 +1,2 @@\n-a\n+b"
    files = (PullFile("app.py", "modified", 1, 1, hunk), PullFile("big.bin", "added", 0, 0, None))
    number = state.add_pull(REPO, "Change a to b", "Fixes #1", user="alice", head="ab", files=files)
    first = state.add_review_comment(
        REPO, number, "why b?", user="alice", path="app.py", line=1, diff_hunk=hunk
    )
    reply = state.add_review_comment(
        REPO, number, "because", user="alice", path="app.py", line=1, diff_hunk=hunk,
        in_reply_to=first,
    )
    return number, first, reply


def test_pull_files_match_spec_and_read_back_through_pygithub(
    github: GitHub, contract: GitHubContract
) -> None:
    number, _, _ = _pull_with_review(github)

    wire = github.raw("GET", f"/repos/{REPO}/pulls/{number}/files")
    files = list(github.client().get_repo(REPO).get_pull(number).get_files())

    contract.validate("/repos/{owner}/{repo}/pulls/{pull_number}/files", "get", 200, wire.json())
    assert [(f.filename, f.additions, f.deletions) for f in files] == [
        ("app.py", 1, 1),
        ("big.bin", 0, 0),
    ]
    assert files[0].patch == "@@ -1,2 +1,2 @@\n-a\n+b" and "patch" not in wire.json()[1]


def test_review_comments_match_spec_and_name_their_thread(
    github: GitHub, contract: GitHubContract
) -> None:
    number, first, reply = _pull_with_review(github)

    one = github.raw("GET", f"/repos/{REPO}/pulls/comments/{reply}")
    listed = github.raw("GET", f"/repos/{REPO}/pulls/{number}/comments")
    pull = github.client().get_repo(REPO).get_pull(number)

    contract.validate("/repos/{owner}/{repo}/pulls/comments/{comment_id}", "get", 200, one.json())
    contract.validate(
        "/repos/{owner}/{repo}/pulls/{pull_number}/comments", "get", 200, listed.json()
    )
    read = pull.get_review_comment(reply)
    assert (read.path, read.line, read.in_reply_to_id) == ("app.py", 1, first)
    assert [c.body for c in pull.get_review_comments()] == ["why b?", "because"]


def test_review_comment_404_when_it_does_not_exist(github: GitHub) -> None:
    assert github.raw("GET", f"/repos/{REPO}/pulls/comments/999999").status_code == 404
