"""The Slack side of a task brief: the thread a request was made in, read by the worker.

``conversations.replies`` (paginated, up to and including the request), each author's display
name (``users.info``, cached for ``context.user_cache_ttl_s``), Keel's own earlier posts
marked, files attached in the thread (listed; text files and images downloaded with the bot
token, which is only ever sent to Slack's own hosts), the channel's name
(``conversations.info``) and the request's permalink (``chat.getPermalink``). Every call is
bounded by ``runtime.brief.attempts``; whatever fails is named in the brief, with the scope
it needs when Slack says which.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.files import SlackFiles, file_ref
from adapters.slack.markup import mentioned_users, plain_text
from adapters.slack.signals import SlackIdentity
from adapters.slack.surface import call_slack
from adapters.slack.workspaces import SlackClients, WebSessions
from runtime.brief.attempts import Failed, RetryPolicy, attempt
from runtime.brief.model import Download, Gathered, Origin, Post, Section, Sender
from runtime.config import ContextConfig
from runtime.errors import Permanent
from runtime.store.records import SenderPart
from runtime.threads import SlackThread, parse_thread

PAGE_SIZE = 200
MAX_PAGES = 10  # a thread longer than this many pages is listed as far as it was read
Clock = Callable[[], float]


@dataclass
class NameCache:
    """Display names by user id, each remembered for ``ttl_s`` seconds."""

    ttl_s: float
    clock: Clock = time.monotonic
    names: dict[str, tuple[float, str]] = field(default_factory=dict)

    def get(self, user_id: str) -> str | None:
        found = self.names.get(user_id)
        if found is None or self.clock() - found[0] > self.ttl_s:
            return None
        return found[1]

    def put(self, user_id: str, name: str) -> None:
        self.names[user_id] = (self.clock(), name)


class SlackReaders:
    """A ``SlackContext`` for each workspace, on that workspace's own bot token.

    With OAuth Keel is installed in several workspaces, and a thread can be read only with
    the token of the workspace it is in (a rotated token is picked up on the next read).
    The brief reads on clients of its own, with the brief's shorter timeout.
    """

    def __init__(
        self,
        clients: SlackClients,
        sessions: WebSessions,
        api_url: str,
        settings: ContextConfig,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self.clients = clients
        self.sessions = sessions
        self.api_url = api_url
        self.settings = settings
        self.clock = clock
        self._names: dict[str, NameCache] = {}

    async def for_team(self, team_id: str) -> SlackContext | None:
        """The reader of ``team_id``'s threads; None if Keel is not installed there."""
        identity = await self.clients.identity(team_id)
        if identity is None:
            return None
        token = (await self.clients.client(team_id)).token or ""
        timeout = max(1, round(self.settings.request_timeout_s))
        names = self._names.setdefault(
            team_id, NameCache(self.settings.user_cache_ttl_s, self.clock)
        )
        return SlackContext(
            self.sessions.client(token, self.api_url, timeout),
            identity,
            SlackFiles(token, self.api_url, self.settings),
            self.settings,
            cache=names,
        )


@dataclass(frozen=True, slots=True)
class _Thread:
    messages: list[dict[str, Any]]
    complete: bool


class SlackContext:
    def __init__(
        self,
        client: AsyncWebClient,
        identity: SlackIdentity,
        files: SlackFiles,
        settings: ContextConfig,
        *,
        clock: Clock = time.monotonic,
        cache: NameCache | None = None,
    ) -> None:
        self.client = client
        self.identity = identity
        self.files = files
        self.settings = settings
        self.policy = RetryPolicy(attempts=settings.fetch_attempts)
        self.cache = cache or NameCache(settings.user_cache_ttl_s, clock)

    async def gather(self, origin: Origin, thread: SlackThread) -> Gathered:
        asked = origin.message if isinstance(origin.message, SlackThread) else thread
        message_ts = asked.target_ts
        missing: list[str] = []
        found = await self._thread(thread.channel, thread.thread_ts, message_ts)
        messages = _noted(found, missing) or []
        if isinstance(found, _Thread) and not found.complete:
            missing.append(f"the Slack thread: only its first {len(messages)} messages were read")
        names = await self._names(_people(origin, messages), missing)
        downloads = await self._downloads(messages, missing)
        facts = await self._facts(origin, thread.channel, message_ts, names, missing)
        posts = tuple(self._post(m, names, message_ts) for m in messages)
        section = Section(_thread_title(len(posts)), posts=posts)
        return Gathered(
            facts=tuple(facts),
            request=plain_text(origin.text, names),
            sections=(section,) if posts else (),
            downloads=tuple(downloads),
            missing=tuple(missing),
        )

    async def sender(self, part: SenderPart) -> Sender:
        user = part.sender_id or ""
        missing: list[str] = []
        names = await self._names([user], missing) if user else {}
        name = names.get(user) or part.name or user or "someone"
        message = parse_thread(part.message) if part.message else None
        if not isinstance(message, SlackThread):
            return Sender(name)
        link = await self._call(
            "permalink",
            partial(
                self.client.chat_getPermalink,
                channel=message.channel,
                message_ts=message.target_ts,
            ),
        )
        return Sender(name, None if isinstance(link, Failed) else str(link["permalink"]))

    # -- the thread -------------------------------------------------------------------------

    async def _thread(self, channel: str, root_ts: str, until_ts: str) -> _Thread | Failed:
        messages: dict[str, dict[str, Any]] = {}
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self._call(
                "the Slack thread (conversations.replies)",
                partial(
                    self.client.conversations_replies,
                    channel=channel,
                    ts=root_ts,
                    latest=until_ts,
                    inclusive=True,
                    limit=PAGE_SIZE,
                    cursor=cursor,
                ),
            )
            if isinstance(page, Failed):
                return page
            # Slack may repeat the parent on each page; a message is kept once.
            messages.update((m["ts"], m) for m in page["messages"] if "ts" in m)
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not page.get("has_more") or not cursor:
                return _Thread(_ordered(messages), complete=True)
        return _Thread(_ordered(messages), complete=False)

    def _post(self, message: Mapping[str, Any], names: Mapping[str, str], request_ts: str) -> Post:
        keel = self._is_keel(message)
        return Post(
            author="Keel" if keel else _author(message, names),
            text=plain_text(str(message.get("text") or ""), names),
            at=datetime.fromtimestamp(float(message["ts"]), UTC),
            is_keel=keel,
            is_request=message["ts"] == request_ts,
            files=tuple(file_ref(f) for f in message.get("files") or ()),
        )

    def _is_keel(self, message: Mapping[str, Any]) -> bool:
        ours = self.identity
        return message.get("user") == ours.bot_user_id or (
            bool(ours.bot_id) and message.get("bot_id") == ours.bot_id
        )

    # -- people -----------------------------------------------------------------------------

    async def _names(self, user_ids: Sequence[str], missing: list[str]) -> dict[str, str]:
        names: dict[str, str] = {}
        failed: list[str] = []
        reason = ""
        for user in dict.fromkeys(user_ids):
            cached = self.cache.get(user)
            if cached is not None:
                names[user] = cached
                continue
            answer = await self._call(
                "display names (users.info)", partial(self.client.users_info, user=user)
            )
            if isinstance(answer, Failed):
                failed.append(user)
                reason = answer.reason
                continue
            names[user] = _display_name(answer["user"])
            self.cache.put(user, names[user])
        if failed:
            listed = ", ".join(failed[:10]) + (" …" if len(failed) > 10 else "")
            missing.append(f"display names of {listed} (users.info: {reason}); ids shown instead")
        return names

    # -- files ------------------------------------------------------------------------------

    async def _downloads(
        self, messages: Sequence[Mapping[str, Any]], missing: list[str]
    ) -> list[Download]:
        files = [dict(f) for m in messages for f in m.get("files") or ()]
        downloads: list[Download] = []
        for file in files:
            if file.get("file_access") == "check_file_info":
                info = await self._call(
                    "file details (files.info)", partial(self.client.files_info, file=file["id"])
                )
                if isinstance(info, Failed):
                    missing.append(str(info))
                    continue
                file = dict(info["file"])
            fetched = sum(1 for d in downloads if d.content is not None)
            downloads.append(await self.files.fetch(file, fetched))
        return downloads

    # -- the header -------------------------------------------------------------------------

    async def _facts(
        self,
        origin: Origin,
        channel: str,
        message_ts: str,
        names: Mapping[str, str],
        missing: list[str],
    ) -> list[tuple[str, str]]:
        facts = []
        if origin.actor_id:
            facts.append(("Requested by", names.get(origin.actor_id) or origin.actor_id))
        where = await self._channel_name(channel, missing)
        facts.append(("Came from", f"Slack, {where}"))
        link = await self._call(
            "the request's permalink (chat.getPermalink)",
            lambda: self.client.chat_getPermalink(channel=channel, message_ts=message_ts),
        )
        if isinstance(link, Failed):
            missing.append(str(link))
        else:
            facts.append(("Link", str(link["permalink"])))
        return facts

    async def _channel_name(self, channel: str, missing: list[str]) -> str:
        info = await self._call(
            "the channel's name (conversations.info)",
            lambda: self.client.conversations_info(channel=channel),
        )
        if isinstance(info, Failed):
            missing.append(str(info))
            return f"channel {channel}"
        if info["channel"].get("is_im"):
            return "a direct message"
        name = info["channel"].get("name")
        return f"#{name}" if name else f"channel {channel}"

    async def _call(
        self, what: str, request: Callable[[], Awaitable[AsyncSlackResponse]]
    ) -> AsyncSlackResponse | Failed:
        return await attempt(what, lambda: _with_scope(request()), self.policy)


async def _with_scope(request: Awaitable[AsyncSlackResponse]) -> AsyncSlackResponse:
    """``call_slack``, with the scope Slack says is missing named in the error."""
    try:
        return await call_slack(request)
    except Permanent as e:
        cause = e.__cause__
        data = getattr(cause.response, "data", None) if isinstance(cause, SlackApiError) else None
        needed = data.get("needed") if isinstance(data, dict) else None
        if needed:
            raise Permanent(f"{e}; the Slack app needs the {needed} scope") from cause
        raise


def _noted(found: _Thread | Failed, missing: list[str]) -> list[dict[str, Any]] | None:
    if isinstance(found, Failed):
        missing.append(str(found))
        return None
    return found.messages


def _ordered(messages: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [messages[ts] for ts in sorted(messages, key=float)]


def _people(origin: Origin, messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Everyone whose name the brief shows: the requester, each author, each mention."""
    people = [origin.actor_id] if origin.actor_id else []
    people += mentioned_users(origin.text)
    for message in messages:
        if message.get("user") and not message.get("bot_id"):
            people.append(str(message["user"]))
        people += mentioned_users(str(message.get("text") or ""))
    return people


def _author(message: Mapping[str, Any], names: Mapping[str, str]) -> str:
    user = message.get("user")
    if user and str(user) in names:
        return names[str(user)]
    profile = message.get("bot_profile") or {}
    return str(profile.get("name") or message.get("username") or user or message.get("bot_id"))


def _display_name(user: Mapping[str, Any]) -> str:
    profile = user.get("profile") or {}
    names = (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    )
    return str(next((n for n in names if n), user.get("id", "someone")))


def _thread_title(count: int) -> str:
    plural = "s" if count != 1 else ""
    return f"Slack thread ({count} message{plural}, up to and including the request)"
