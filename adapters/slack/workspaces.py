"""Which Slack workspaces Keel is in, who it is there, and a Web API client for each.

- ``SingleWorkspace``: the simple default, one ``slack.bot_token``; its identity is read once
  at start (auth.test). An ``app_uninstalled``/``tokens_revoked`` disables it until restart.
- ``InstalledWorkspaces``: multi-workspace install (``slack.oauth``); each workspace's bot
  comes from the sealed installation store, a rotating token is refreshed before it expires
  (and saved), and a workspace that removed Keel is forgotten.

Every Web API call for a thread goes through ``client(team_id)``, so a post always carries
the token of the workspace it goes to. Clients are made by ``WebSessions``, whose aiohttp
sessions they share; its owner (``SlackConnection``) closes them when Keel stops.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from slack_sdk.errors import SlackApiError, SlackTokenRotationError
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.signals import SlackIdentity
from runtime.errors import Permanent, Retryable

if TYPE_CHECKING:  # OAuth mode only: sealing imports cryptography (~6 MB)
    from adapters.slack.installations import SealedInstallationStore

log = logging.getLogger(__name__)


class SlackClients(Protocol):
    """What the surface needs: a client and our bot's id, per workspace."""

    async def client(self, team_id: str) -> AsyncWebClient: ...

    async def identity(self, team_id: str | None) -> SlackIdentity | None: ...


class WebSessions:
    """The aiohttp sessions that Web API clients share, one per event loop and timeout, and
    the clients that share them.

    Without a session slack_sdk opens one per call, so every 👀 and post paid for a new
    connector and TCP connection; a shared session keeps connections alive between calls.
    Tokens travel in each request's headers, and the sessions keep no cookies, so clients of
    different workspaces can share one. Keyed by event loop: each loop (Keel's, or a test's)
    gets its own sessions, and a finished loop's go with it.
    """

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[int, aiohttp.ClientSession]
        ] = weakref.WeakKeyDictionary()

    def client(self, token: str | None, api_url: str, timeout_s: int = 30) -> AsyncWebClient:
        return PooledWebClient(self, token, api_url, timeout_s)

    def session(self, timeout_s: int) -> aiohttp.ClientSession:
        """The running loop's session for Web API calls with this timeout."""
        sessions = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        session = sessions.get(timeout_s)
        if session is None or session.closed:
            session = sessions[timeout_s] = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return session

    async def close(self) -> None:
        """Close the running loop's sessions (Keel's stop)."""
        for session in self._by_loop.pop(asyncio.get_running_loop(), {}).values():
            await session.close()


class PooledWebClient(AsyncWebClient):
    """An AsyncWebClient whose calls go through the session ``WebSessions`` keeps for the
    running loop and its timeout."""

    def __init__(
        self, sessions: WebSessions, token: str | None, api_url: str, timeout_s: int
    ) -> None:
        # No retry handlers: the Web API is all POSTs, and a blind repeat could post twice.
        super().__init__(token=token, base_url=api_url, timeout=timeout_s, retry_handlers=[])
        self._sessions = sessions

    # slack_sdk's one public seam is ``session=`` at construction, but an aiohttp session
    # belongs to the event loop it was made in, and clients are built before (or outside) the
    # loop that uses them; so the running loop's session is set just before each call, in the
    # private ``_request`` that reads ``self.session``. On a slack_sdk upgrade that renames
    # ``_request``, changes its keywords or stops reading ``self.session``, calls silently go
    # back to one connection each: tests/unit/test_slack_pooled_client.py fails first.
    async def _request(self, *, http_verb: str, api_url: str, req_args: Any) -> Any:
        self.session = self._sessions.session(int(self.timeout))
        return await super()._request(http_verb=http_verb, api_url=api_url, req_args=req_args)


class SingleWorkspace:
    def __init__(self, client: AsyncWebClient, identity: SlackIdentity) -> None:
        self._client = client
        self._identity = identity
        self.removed = False

    @property
    def own_identity(self) -> SlackIdentity:
        return self._identity

    async def identity(self, team_id: str | None) -> SlackIdentity | None:
        return None if self.removed else self._identity

    async def client(self, team_id: str) -> AsyncWebClient:
        if self.removed:
            raise Permanent(f"Keel was removed from Slack workspace {self._identity.team_id}")
        return self._client

    async def revoke(self, team_id: str, event: dict[str, Any]) -> None:
        if team_id == self._identity.team_id and _bot_revoked(event, self._identity):
            self.removed = True


class InstalledWorkspaces:
    def __init__(
        self,
        store: SealedInstallationStore,
        *,
        sessions: WebSessions,
        api_url: str,
        client_id: str,
        client_secret: str,
        rotation_minutes: int = 120,
    ) -> None:
        self.store = store
        self.sessions = sessions
        self.api_url = api_url
        self.rotation_minutes = rotation_minutes
        self._rotator = AsyncTokenRotator(
            client_id=client_id, client_secret=client_secret, client=sessions.client(None, api_url)
        )
        self._locks: dict[str, asyncio.Lock] = {}

    async def identity(self, team_id: str | None) -> SlackIdentity | None:
        bot = await self._bot(team_id) if team_id else None
        if bot is None:
            return None
        return SlackIdentity(
            team_id=str(bot.team_id),
            bot_user_id=str(bot.bot_user_id or ""),
            bot_id=str(bot.bot_id or ""),
            app_id=str(bot.app_id or ""),
        )

    async def client(self, team_id: str) -> AsyncWebClient:
        # One rotation at a time per workspace: a refresh token is good once.
        async with self._locks.setdefault(team_id, asyncio.Lock()):
            bot = await self._bot(team_id)
            if bot is None:
                raise Permanent(f"Keel is not installed in Slack workspace {team_id}")
            bot = await self._rotated(bot)
        return self.sessions.client(bot.bot_token, self.api_url)

    async def revoke(self, team_id: str, event: dict[str, Any]) -> None:
        if event.get("type") == "app_uninstalled":
            await self.store.async_delete_all(enterprise_id=None, team_id=team_id)
            return
        tokens = event.get("tokens") or {}
        if tokens.get("bot"):
            await self.store.async_delete_bot(enterprise_id=None, team_id=team_id)
        for user_id in tokens.get("oauth") or ():
            await self.store.async_delete_installation(
                enterprise_id=None, team_id=team_id, user_id=user_id
            )

    async def _bot(self, team_id: str | None) -> Bot | None:
        bot: Bot | None = await self.store.async_find_bot(enterprise_id=None, team_id=team_id)
        return bot

    async def _rotated(self, bot: Bot) -> Bot:
        if bot.bot_refresh_token is None:
            return bot
        try:
            refreshed: Bot | None = await self._rotator.perform_bot_token_rotation(
                bot=bot, minutes_before_expiration=self.rotation_minutes
            )
        except SlackTokenRotationError as e:
            cause = e.api_error if isinstance(e.api_error, SlackApiError) else None
            code = cause.response.get("error") if cause is not None else "unknown"
            # Another process may have used the refresh token first and saved the new one.
            raise Retryable(f"Slack token rotation for {bot.team_id} failed: {code}") from e
        except (KeyError, TypeError, ValueError) as e:  # slack_sdk reading a bad answer
            raise Permanent(f"Slack token rotation for {bot.team_id}: bad answer") from e
        if refreshed is None:
            return bot
        await self.store.async_save_bot(refreshed)
        log.info("Slack workspace %s: bot token rotated", bot.team_id)
        return refreshed


def _bot_revoked(event: dict[str, Any], identity: SlackIdentity) -> bool:
    if event.get("type") == "app_uninstalled":
        return True
    bots = (event.get("tokens") or {}).get("bot") or ()
    return identity.bot_user_id in bots or not identity.bot_user_id
