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
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from adapters.config import GitHubConfig
from adapters.github.errors import message_of, translate_github_error
from adapters.github.installations import Installations
from runtime.errors import ConfigError, NotFound, Permanent, Retryable
from runtime.threads import GitHubIssue

if TYPE_CHECKING:
    # PyGithub (with requests, urllib3, PyJWT and PyNaCl) and httpx are imported by the first
    # call that needs them: a process that never calls GitHub never loads them (idle RSS, #19).
    import aiohttp
    from github import Auth, Github

T = TypeVar("T")

_DEFAULT_TIMEOUT_S = 15
_LOOKUP_THREADS = 16


@dataclass(frozen=True, slots=True)
class Comment:
    comment_id: int
    body: str
    url: str
    author: str


@dataclass(frozen=True, slots=True)
class ReviewCommentInfo:
    """A comment on a line of a pull request's diff; ``in_reply_to`` names its thread."""

    comment_id: int
    path: str
    line: int | None
    diff_hunk: str
    body: str
    author: str
    in_reply_to: int | None
    url: str
    side: str = "RIGHT"
    review_id: int | None = None  # the review it was posted in
    commit_id: str = ""  # the head it was written on


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
    """Async facade over PyGithub for the calls Keel makes; every call runs off the loop.

    With App auth each call goes out with the token of the installation that reaches its
    repository (``Installations``); with a token, every call uses that token.
    """

    def __init__(
        self,
        connect: Callable[[], Github] | None = None,
        *,
        refreshable: bool = False,
        installations: Installations | None = None,
        api_url: str = "",
        timeout_s: int = _DEFAULT_TIMEOUT_S,
    ) -> None:
        if (connect is None) == (installations is None):
            raise ValueError("GitHubClient: give either connect or installations")
        self._connect = connect
        self._refreshable = refreshable
        self._github: Github | None = None  # connected by the first call
        self.installations = installations
        self._api_url = api_url
        self._timeout_s = timeout_s
        self._by_installation: dict[int, tuple[str, Github]] = {}
        self._token: str | None = None
        self._clone_urls: dict[str, str] = {}
        self._session: tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession] | None = None
        # Permission lookups wait in threads of their own: a slow GitHub must not hold the
        # threads every other call (and the loop's other work) needs.
        self._lookups = ThreadPoolExecutor(_LOOKUP_THREADS, thread_name_prefix="github-lookup")

    @classmethod
    def from_config(
        cls, config: GitHubConfig, *, timeout_s: int = _DEFAULT_TIMEOUT_S
    ) -> GitHubClient:
        if config.token is not None:
            token = config.token.get_secret_value()
            return cls.with_token(config.api_url, token, timeout_s=timeout_s)
        app = config.app
        if app.app_id is None or app.private_key is None:
            raise ConfigError("github: set github.token or github.app (app_id and private_key)")
        private_key = app.private_key.get_secret_value()
        return cls.as_installation(
            config.api_url, app.app_id, private_key, app.installation_id, timeout_s=timeout_s
        )

    @classmethod
    def with_token(
        cls, api_url: str, token: str, *, timeout_s: int = _DEFAULT_TIMEOUT_S
    ) -> GitHubClient:
        client = cls(
            lambda: _github(api_url, _token_auth(token), timeout_s),
            refreshable=False,
            api_url=api_url,
            timeout_s=timeout_s,
        )
        client._token = token
        return client

    @classmethod
    def as_installation(
        cls,
        api_url: str,
        app_id: int,
        private_key: str,
        installation_id: int | None = None,
        *,
        timeout_s: int = _DEFAULT_TIMEOUT_S,
    ) -> GitHubClient:
        """App auth; ``installation_id`` serves a repository no other installation reaches."""
        installations = Installations(
            api_url,
            app_id,
            private_key,
            default_installation=installation_id,
            timeout_s=timeout_s,
        )
        return cls(installations=installations, api_url=api_url, timeout_s=timeout_s)

    async def call(
        self,
        operation: Callable[[Github], T],
        *,
        repo: str | None = None,
        pool: ThreadPoolExecutor | None = None,
    ) -> T:
        """Run ``operation`` in a thread (of ``pool``, or the loop's default) as whoever may
        act on ``repo``; a refused installation token is replaced once and the call repeated."""
        if self.installations is not None:
            return await self._as_installation(self.installations, operation, repo, pool)
        assert self._connect is not None
        if self._github is None:
            self._github = self._connect()
        try:
            return await _run(pool, operation, self._github)
        except _Unauthorized as refused:
            if not self._refreshable:
                raise Permanent(f"GitHub refused the credentials: {refused}") from refused.__cause__
        self._github = self._connect()
        try:
            return await _run(pool, operation, self._github)
        except _Unauthorized as refused:
            raise Permanent(f"GitHub refused a fresh token: {refused}") from refused.__cause__

    async def _as_installation(
        self,
        installations: Installations,
        operation: Callable[[Github], T],
        repo: str | None,
        pool: ThreadPoolExecutor | None,
    ) -> T:
        if repo is not None:
            installation = await installations.installation_for(repo)
        elif installations.default_installation is not None:
            installation = installations.default_installation
        else:
            raise Permanent("no repository names the GitHub App installation to act as")
        for fresh in (False, True):
            token = (await installations.token(installation)).token
            github = self._github_for(installation, token)
            try:
                return await _run(pool, operation, github)
            except _Unauthorized as refused:
                installations.forget(installation, token)
                if fresh:
                    raise Permanent(f"GitHub refused a fresh token: {refused}") from None
        raise AssertionError("unreachable")

    def _github_for(self, installation: int, token: str) -> Github:
        current = self._by_installation.get(installation)
        if current is not None and current[0] == token:
            return current[1]
        github = _github(self._api_url, _token_auth(token), self._timeout_s)
        self._by_installation[installation] = (token, github)
        return github

    async def git_token(self, repo: str) -> str | None:
        """The token git sends for ``repo``: its installation's, or the configured token."""
        if self.installations is None:
            return self._token
        return await self.installations.token_for_repo(repo)

    async def clone_url(self, repo: str) -> str:
        """Where ``repo`` is cloned from over HTTPS, as GitHub reports it."""
        if repo not in self._clone_urls:
            url = await self.call(lambda gh: str(gh.get_repo(repo).clone_url), repo=repo)
            self._clone_urls[repo] = url
        return self._clone_urls[repo]

    async def permission(self, repo: str, login: str) -> str | None:
        """``login``'s permission on ``repo`` (routing's ``PermissionSource``)."""
        # role_name, not the legacy permission field, which folds triage into read and
        # maintain into write. A custom role answers its own name: ranked as its base.
        try:
            value = await self.call(
                lambda gh: gh.get_repo(repo).get_collaborator_role_name(login),
                repo=repo,
                pool=self._lookups,
            )
        except NotFound:
            return "none"  # GitHub knows no such user here: a definite answer, not a failure
        return str(value) if value else None

    # -- issues and comments ------------------------------------------------------------

    async def create_comment(self, repo: str, number: int, body: str) -> Comment:
        return await self.call(
            lambda gh: _comment(gh.get_repo(repo).get_issue(number).create_comment(body)),
            repo=repo,
        )

    async def list_comments(self, repo: str, number: int) -> list[Comment]:
        return await self.call(
            lambda gh: [_comment(c) for c in gh.get_repo(repo).get_issue(number).get_comments()],
            repo=repo,
        )

    async def edit_comment(self, repo: str, number: int, comment_id: int, body: str) -> None:
        await self.call(
            lambda gh: gh.get_repo(repo).get_issue(number).get_comment(comment_id).edit(body),
            repo=repo,
        )

    async def react(self, ref: GitHubIssue, content: str) -> None:
        """React to the issue, or to the comment it names: an issue comment or, failing that,
        a review comment on a line of the pull request (GitHub numbers them apart)."""
        # One POST: fetching the repository, issue and comment objects first (what
        # ``create_reaction`` needs) would add three GETs to every acknowledgement.
        target = f"comments/{ref.comment_id}" if ref.comment_id is not None else str(ref.number)
        try:
            await self._react(f"/repos/{ref.repo}/issues/{target}/reactions", content, ref.repo)
        except NotFound:
            if ref.comment_id is None:
                raise
            review_comment = f"/repos/{ref.repo}/pulls/comments/{ref.comment_id}/reactions"
            await self._react(review_comment, content, ref.repo)

    async def _react(self, path: str, content: str, repo: str) -> None:
        """The 👀 of every GitHub delivery Keel takes: one POST on the event loop, not a
        thread's PyGithub and requests (several times the CPU of the call itself)."""
        if self.installations is None:
            if self._token is None:  # a connection of the caller's making: through it
                await self.call(_reaction_post(path, content), repo=repo)
                return
            try:
                await self._post_json(path, {"content": content}, self._token)
            except _Unauthorized as refused:
                raise Permanent(f"GitHub refused the credentials: {refused}") from refused.__cause__
            return
        installation = await self.installations.installation_for(repo)
        for fresh in (False, True):
            token = (await self.installations.token(installation)).token
            try:
                await self._post_json(path, {"content": content}, token)
                return
            except _Unauthorized as refused:
                self.installations.forget(installation, token)
                if fresh:
                    raise Permanent(f"GitHub refused a fresh token: {refused}") from None

    async def _post_json(self, path: str, body: dict[str, Any], token: str) -> None:
        """POST ``body``; GitHub's error answers translated as PyGithub's are (``call``)."""
        import aiohttp
        from github import Consts, GithubException

        headers = {
            "Authorization": f"token {token}",
            "Accept": Consts.mediaTypeReactionsPreview,
            "User-Agent": Consts.DEFAULT_USER_AGENT,
        }
        try:
            async with self._http().post(
                self._api_url.rstrip("/") + path, json=body, headers=headers
            ) as response:
                text = await response.text()  # to the end: a truncated answer is no answer
                answered = dict(response.headers)
        except (aiohttp.ClientError, TimeoutError) as e:
            # The request may have landed (a dropped response): a reaction is idempotent.
            raise Retryable(f"GitHub transport error, outcome unknown: {type(e).__name__}") from e
        if response.status < 300:
            return
        error = GithubException(response.status, _json_or_text(text), answered)
        if error.status == 401:
            raise _Unauthorized(f"GitHub 401: {message_of(error)}") from error
        raise translate_github_error(error) from error

    def _http(self) -> aiohttp.ClientSession:
        """This loop's HTTP session, kept alive between calls (``close`` ends it)."""
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session[0] is not loop or self._session[1].closed:
            session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._session = (loop, session)
        return self._session[1]

    async def close(self) -> None:
        """Close the HTTP session of the running loop (Keel's stop)."""
        if self._session is not None and self._session[0] is asyncio.get_running_loop():
            await self._session[1].close()
        self._session = None

    # -- pull requests and CI ---------------------------------------------------------------

    async def create_pull(
        self, repo: str, *, head: str, base: str, title: str, body: str
    ) -> PullRequestInfo:
        return await self.call(
            lambda gh: _pull(
                gh.get_repo(repo).create_pull(base=base, head=head, title=title, body=body)
            ),
            repo=repo,
        )

    async def find_pulls(self, repo: str, *, head: str) -> list[PullRequestInfo]:
        """Pull requests in any state whose head is ``owner:branch``."""
        return await self.call(
            lambda gh: [_pull(p) for p in gh.get_repo(repo).get_pulls(state="all", head=head)],
            repo=repo,
        )

    async def get_pull(self, repo: str, number: int) -> PullRequestInfo:
        return await self.call(lambda gh: _pull(gh.get_repo(repo).get_pull(number)), repo=repo)

    async def review_comments(self, repo: str, number: int) -> list[ReviewCommentInfo]:
        return await self.call(
            lambda gh: [
                review_comment_of(c)
                for c in gh.get_repo(repo).get_pull(number).get_review_comments()
            ]
        )

    async def reply_to_review_comment(
        self, repo: str, number: int, comment_id: int, body: str
    ) -> ReviewCommentInfo:
        """A reply in the review thread of ``comment_id``."""
        return await self.call(
            lambda gh: review_comment_of(
                gh.get_repo(repo).get_pull(number).create_review_comment_reply(comment_id, body)
            )
        )

    async def job_log(self, repo: str, job_id: int) -> str:
        """A GitHub Actions job's log (an Actions check run's id is its job's): GitHub
        answers with a short-lived download URL, fetched without our token."""
        location = await self.call(lambda gh: gh.get_repo(repo).get_workflow_job(job_id).logs_url())
        import httpx

        try:
            async with httpx.AsyncClient(timeout=60) as http:
                response = await http.get(location)
        except httpx.HTTPError as e:
            raise Retryable(f"downloading the log of job {job_id} failed: {e}") from e
        if response.status_code >= 500:
            raise Retryable(f"the log of job {job_id} answered {response.status_code}")
        if response.status_code != 200:
            raise NotFound(f"the log of job {job_id} answered {response.status_code}")
        return response.text

    async def ci_state(self, repo: str, sha: str) -> tuple[list[CheckRunInfo], list[StatusInfo]]:
        """The check runs and the commit statuses reported for ``sha``."""

        def ci_state(gh: Github) -> tuple[list[CheckRunInfo], list[StatusInfo]]:
            commit = gh.get_repo(repo).get_commit(sha)
            runs = [_check_run(run) for run in commit.get_check_runs()]
            combined = commit.get_combined_status()
            return runs, [StatusInfo(s.context, s.state) for s in combined.statuses]

        return await self.call(ci_state, repo=repo)


async def _run(
    pool: ThreadPoolExecutor | None, operation: Callable[[Github], T], github: Github
) -> T:
    if pool is None:
        return await asyncio.to_thread(_translated, operation, github)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(pool, _translated, operation, github)


def _reaction_post(path: str, content: str) -> Callable[[Github], None]:
    def react(gh: Github) -> None:
        from github import Consts

        gh.requester.requestJsonAndCheck(
            "POST", path, input={"content": content},
            headers={"Accept": Consts.mediaTypeReactionsPreview},
        )

    return react


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _token_auth(token: str) -> Auth.Token:
    from github import Auth

    return Auth.Token(token)


def _github(api_url: str, auth: Auth.Auth, timeout_s: int) -> Github:
    from github import Github

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
    import requests
    import urllib3.exceptions
    from github import GithubException

    try:
        return operation(github)
    except GithubException as e:
        if e.status == 401:
            raise _Unauthorized(f"GitHub 401: {message_of(e)}") from e
        raise translate_github_error(e) from e
    except (
        requests.exceptions.RequestException,
        urllib3.exceptions.HTTPError,
        http.client.HTTPException,
        ConnectionError,
        TimeoutError,
    ) as e:
        # The request may have landed (a dropped response): callers that wrote reconcile.
        raise Retryable(f"GitHub transport error, outcome unknown: {type(e).__name__}") from e


def _comment(comment: Any) -> Comment:
    return Comment(comment.id, comment.body or "", comment.html_url or "", comment.user.login)


def review_comment_of(comment: Any) -> ReviewCommentInfo:
    raw = comment.raw_data
    return ReviewCommentInfo(
        comment_id=comment.id,
        path=comment.path,
        line=raw.get("line") or raw.get("original_line"),
        diff_hunk=comment.diff_hunk or "",
        body=comment.body or "",
        author=comment.user.login if comment.user else "",
        in_reply_to=raw.get("in_reply_to_id"),
        url=comment.html_url,
        side=raw.get("side") or "RIGHT",
        review_id=raw.get("pull_request_review_id"),
        commit_id=raw.get("original_commit_id") or raw.get("commit_id") or "",
    )


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
