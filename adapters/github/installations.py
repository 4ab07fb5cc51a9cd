"""GitHub App installations: which installation reaches a repository, and its tokens.

A webhook names its installation (``installation.id``); ``remember`` records that for the
repository, and a repository seen no other way is looked up once
(``GET /repos/{owner}/{repo}/installation``, with the App's JWT). Installation tokens live an
hour; each is cached until ``margin_s`` before it expires, so every API call and every git
push or fetch of a long task gets a token that is still good. ``forget`` drops a token GitHub
refused, so the next caller gets a fresh one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.github.errors import translate_github_error
from runtime.errors import NotFound, Permanent, Retryable

if TYPE_CHECKING:  # PyGithub and requests are imported when App auth is set up (idle RSS, #19)
    from github import GithubIntegration


@dataclass(frozen=True, slots=True)
class InstallationToken:
    token: str
    expires_at: float  # epoch seconds


class Installations:
    """Installation lookups and tokens for one GitHub App (PyGithub's ``GithubIntegration``)."""

    def __init__(
        self,
        api_url: str,
        app_id: int,
        private_key: str,
        *,
        default_installation: int | None = None,
        timeout_s: int = 15,
        margin_s: float = 300.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.app_id = app_id
        self.default_installation = default_installation
        self.margin_s = margin_s
        self.now = now
        from github import Auth, GithubIntegration

        self._integration = GithubIntegration(
            auth=Auth.AppAuth(app_id, private_key),
            base_url=api_url.rstrip("/"),
            timeout=timeout_s,
            retry=None,
            seconds_between_requests=None,
            seconds_between_writes=None,
        )
        self._by_repo: dict[str, int] = {}
        self._tokens: dict[int, InstallationToken] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self.tokens_issued = 0

    @property
    def integration(self) -> GithubIntegration:
        """The JWT-authenticated client (App-level endpoints such as hook deliveries)."""
        return self._integration

    def remember(self, repo: str, installation_id: int) -> None:
        """What a webhook said: ``repo`` is reached through ``installation_id``."""
        self._by_repo[repo.lower()] = installation_id

    async def installation_for(self, repo: str) -> int:
        known = self._by_repo.get(repo.lower())
        if known is not None:
            return known
        owner, _, name = repo.partition("/")
        try:
            found = int(
                await asyncio.to_thread(
                    _call, lambda: self._integration.get_repo_installation(owner, name).id
                )
            )
        except NotFound:
            if self.default_installation is None:
                raise Permanent(f"the GitHub App is not installed on {repo}") from None
            found = self.default_installation
        self._by_repo[repo.lower()] = found
        return found

    async def token(self, installation_id: int) -> InstallationToken:
        """A token of ``installation_id`` good for at least ``margin_s`` more seconds."""
        lock = self._locks.setdefault(installation_id, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(installation_id)
            if cached is not None and cached.expires_at - self.margin_s > self.now():
                return cached
            fresh = await asyncio.to_thread(self._issue, installation_id)
            self._tokens[installation_id] = fresh
            self.tokens_issued += 1
            return fresh

    async def token_for_repo(self, repo: str) -> str:
        return (await self.token(await self.installation_for(repo))).token

    def forget(self, installation_id: int, token: str) -> None:
        """GitHub refused ``token``: the next caller gets a new one."""
        cached = self._tokens.get(installation_id)
        if cached is not None and cached.token == token:
            del self._tokens[installation_id]

    def _issue(self, installation_id: int) -> InstallationToken:
        authorization = _call(lambda: self._integration.get_access_token(installation_id))
        expires = authorization.expires_at
        expires_at = expires.timestamp() if expires is not None else self.now() + 3600
        return InstallationToken(authorization.token, expires_at)


def _call(operation: Callable[[], Any]) -> Any:
    import requests
    from github import GithubException

    try:
        return operation()
    except GithubException as e:
        raise translate_github_error(e) from e
    except (requests.exceptions.RequestException, ConnectionError, TimeoutError) as e:
        raise Retryable(f"GitHub transport error: {type(e).__name__}") from e
