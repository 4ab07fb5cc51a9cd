"""The one place PyGithub's blocking calls run: in a worker thread, with errors translated.

``GitHubClient`` authenticates with a personal access token or as a GitHub App installation,
turns off PyGithub's own retries and request spacing (Keel retries under its own keys, and a
repeated POST could write twice), and hands back frozen values instead of PyGithub objects.
An installation token that GitHub stops accepting (401) is replaced once and the call repeated;
that is safe for writes too, because a 401 means the request was refused before any effect.
"""

from __future__ import annotations

import asyncio
import http.client
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import requests
import urllib3.exceptions
from github import Auth, Consts, Github, GithubException

from adapters.config import GitHubConfig
from runtime.errors import ConfigError, NotFound, Permanent, Retryable
from runtime.threads import GitHubIssue

T = TypeVar("T")

_DEFAULT_TIMEOUT_S = 15
_TRANSPORT_ERRORS = (
    requests.exceptions.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
)
@dataclass(frozen=True, slots=True)
class Comment:
    comment_id: int
    body: str
    url: str
    author: str


@dataclass(frozen=True, slots=True)
class PullRequestInfo:
    number: int
    url: str
    state: str
    head_ref: str
    head_sha: str
    base_ref: str
    title: str


@dataclass(frozen=True, slots=True)
class CheckRunInfo:
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    url: str | None


@dataclass(frozen=True, slots=True)
class StatusInfo:
    context: str
    state: str


class GitHubClient:
    """Async facade over PyGithub for the calls Keel makes; every call runs off the loop."""

    def __init__(self, connect: Callable[[], Github], *, refreshable: bool) -> None:
        self._connect = connect
        self._refreshable = refreshable
        self._github = connect()

    @classmethod
    def from_config(
        cls, config: GitHubConfig, *, timeout_s: int = _DEFAULT_TIMEOUT_S
    ) -> GitHubClient:
        if config.token is not None:
            token = config.token.get_secret_value()
            return cls.with_token(config.api_url, token, timeout_s=timeout_s)
        app = config.app
        if app.app_id is None or app.private_key is None or app.installation_id is None:
            raise ConfigError("github: set github.token or every key of github.app")
        private_key = app.private_key.get_secret_value()
        return cls.as_installation(
            config.api_url, app.app_id, private_key, app.installation_id, timeout_s=timeout_s
        )

    @classmethod
    def with_token(
        cls, api_url: str, token: str, *, timeout_s: int = _DEFAULT_TIMEOUT_S
    ) -> GitHubClient:
        return cls(lambda: _github(api_url, Auth.Token(token), timeout_s), refreshable=False)

    @classmethod
    def as_installation(
        cls,
        api_url: str,
        app_id: int,
        private_key: str,
        installation_id: int,
        *,
        timeout_s: int = _DEFAULT_TIMEOUT_S,
    ) -> GitHubClient:
        def connect() -> Github:
            # A fresh installation auth holds no token, so its first request fetches a new one.
            auth = Auth.AppAuth(app_id, private_key).get_installation_auth(installation_id)
            return _github(api_url, auth, timeout_s)

        return cls(connect, refreshable=True)

    async def call(self, operation: Callable[[Github], T]) -> T:
        """Run ``operation`` in a thread; refresh a refused installation token once."""
        try:
            return await asyncio.to_thread(_translated, operation, self._github)
        except _Unauthorized as refused:
            if not self._refreshable:
                raise Permanent(f"GitHub refused the credentials: {refused}") from refused.__cause__
        self._github = self._connect()
        try:
            return await asyncio.to_thread(_translated, operation, self._github)
        except _Unauthorized as refused:
            raise Permanent(f"GitHub refused a fresh token: {refused}") from refused.__cause__

    async def permission(self, repo: str, login: str) -> str | None:
        """``login``'s permission on ``repo`` (routing's ``PermissionSource``)."""
        value = await self.call(lambda gh: gh.get_repo(repo).get_collaborator_permission(login))
        return str(value)

    # -- issues and comments ------------------------------------------------------------

    async def create_comment(self, repo: str, number: int, body: str) -> Comment:
        return await self.call(
            lambda gh: _comment(gh.get_repo(repo).get_issue(number).create_comment(body))
        )

    async def list_comments(self, repo: str, number: int) -> list[Comment]:
        return await self.call(
            lambda gh: [_comment(c) for c in gh.get_repo(repo).get_issue(number).get_comments()]
        )

    async def edit_comment(self, repo: str, number: int, comment_id: int, body: str) -> None:
        await self.call(
            lambda gh: gh.get_repo(repo).get_issue(number).get_comment(comment_id).edit(body)
        )

    async def react(self, ref: GitHubIssue, content: str) -> None:
        # One POST: fetching the repository, issue and comment objects first (what
        # ``create_reaction`` needs) would add three GETs to every acknowledgement.
        target = f"comments/{ref.comment_id}" if ref.comment_id is not None else str(ref.number)
        path = f"/repos/{ref.repo}/issues/{target}/reactions"

        def react(gh: Github) -> None:
            gh.requester.requestJsonAndCheck(
                "POST", path, input={"content": content},
                headers={"Accept": Consts.mediaTypeReactionsPreview},
            )

        await self.call(react)

    # -- pull requests and CI ---------------------------------------------------------------

    async def create_pull(
        self, repo: str, *, head: str, base: str, title: str, body: str
    ) -> PullRequestInfo:
        return await self.call(
            lambda gh: _pull(
                gh.get_repo(repo).create_pull(base=base, head=head, title=title, body=body)
            )
        )

    async def find_pulls(self, repo: str, *, head: str) -> list[PullRequestInfo]:
        """Pull requests in any state whose head is ``owner:branch``."""
        return await self.call(
            lambda gh: [_pull(p) for p in gh.get_repo(repo).get_pulls(state="all", head=head)]
        )

    async def get_pull(self, repo: str, number: int) -> PullRequestInfo:
        return await self.call(lambda gh: _pull(gh.get_repo(repo).get_pull(number)))

    async def ci_state(self, repo: str, sha: str) -> tuple[list[CheckRunInfo], list[StatusInfo]]:
        """The check runs and the commit statuses reported for ``sha``."""

        def ci_state(gh: Github) -> tuple[list[CheckRunInfo], list[StatusInfo]]:
            commit = gh.get_repo(repo).get_commit(sha)
            runs = [_check_run(run) for run in commit.get_check_runs()]
            combined = commit.get_combined_status()
            return runs, [StatusInfo(s.context, s.state) for s in combined.statuses]

        return await self.call(ci_state)


def _github(api_url: str, auth: Auth.Auth, timeout_s: int) -> Github:
    return Github(
        base_url=api_url.rstrip("/"),
        auth=auth,
        timeout=timeout_s,
        retry=None,
        seconds_between_requests=None,
        seconds_between_writes=None,
        lazy=True,
    )


class _Unauthorized(Exception):
    """A 401, kept apart from Permanent so ``call`` can refresh the token first."""


def _translated(operation: Callable[[Github], T], github: Github) -> T:
    try:
        return operation(github)
    except GithubException as e:
        if e.status == 401:
            raise _Unauthorized(f"GitHub 401: {_message(e)}") from e
        raise translate_github_error(e) from e
    except _TRANSPORT_ERRORS as e:
        # The request may have landed (a dropped response): callers that wrote reconcile.
        raise Retryable(f"GitHub transport error, outcome unknown: {type(e).__name__}") from e


def translate_github_error(error: GithubException) -> Exception:
    """Retryable for rate limits and server errors; NotFound for 404; otherwise Permanent."""
    message = f"GitHub {error.status}: {_message(error)}"
    headers = {k.lower(): v for k, v in (error.headers or {}).items()}
    if error.status == 429 or (error.status == 403 and _rate_limited(message, headers)):
        return Retryable(message, retry_after_s=_retry_after(headers))
    if error.status == 404:
        return NotFound(message)
    if error.status >= 500:
        return Retryable(message)
    return Permanent(message)


def _rate_limited(message: str, headers: dict[str, str]) -> bool:
    return (
        "retry-after" in headers
        or headers.get("x-ratelimit-remaining") == "0"
        or "rate limit" in message.lower()
    )


def _retry_after(headers: dict[str, str]) -> float | None:
    if (after := headers.get("retry-after", "")).isdigit():
        return float(after)
    if (reset := headers.get("x-ratelimit-reset", "")).isdigit():
        return max(0.0, float(reset) - time.time())
    # GitHub asks for at least a minute's pause after a secondary limit without a header.
    return 60.0


def _message(error: GithubException) -> str:
    data: Any = error.data
    if isinstance(data, dict):
        text = str(data.get("message", ""))
        details = [str(e.get("message") or e.get("code")) for e in data.get("errors") or []]
        return "; ".join([text, *details]) if details else text
    return str(data)


def _comment(comment: Any) -> Comment:
    return Comment(comment.id, comment.body or "", comment.html_url or "", comment.user.login)


def _pull(pull: Any) -> PullRequestInfo:
    return PullRequestInfo(
        number=pull.number,
        url=pull.html_url,
        state=pull.state,
        head_ref=pull.head.ref,
        head_sha=pull.head.sha,
        base_ref=pull.base.ref,
        title=pull.title,
    )


def _check_run(run: Any) -> CheckRunInfo:
    return CheckRunInfo(run.name, run.head_sha, run.status, run.conclusion, run.html_url)
