"""SlackSurface: replies in a Slack thread through slack_sdk's AsyncWebClient.

Each call uses the client of the thread's workspace (``workspaces.SlackClients``), so a post
carries that workspace's token. Bodies are rendered from Markdown to mrkdwn (``mrkdwn.py``)
at the wire; a post with actions gets Block Kit buttons (a section with the text, then an
actions block), and an edit without them removes the buttons. Several actions under one
name are one choice, shown as a select.

Every post carries message metadata ``{"event_type": "keel_post", "event_payload":
{"key": key}}``; reconciling a post whose response was lost reads the thread with
``include_all_metadata`` and looks for that key. Clients have no retry handlers: Slack's Web
API is all POSTs, and repeating one blindly could post twice. Slack errors are translated
here, once, into Retryable or Permanent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.config import SlackConfig
from adapters.slack.mrkdwn import to_mrkdwn
from adapters.slack.signals import SlackIdentity
from adapters.slack.workspaces import SingleWorkspace, SlackClients, WebSessions
from runtime.errors import ConfigError, Permanent, Retryable
from runtime.surfaces import Action
from runtime.threads import SlackChannel, SlackThread, ThreadRef

# chat.postMessage truncates text beyond 40,000 characters without saying so; we say so.
TEXT_LIMIT = 40_000
# A section block's text is limited to 3,000 characters.
SECTION_LIMIT = 3_000
_TRUNCATED = "\n… (truncated)"
_EVENT_TYPE = "keel_post"
# A static select lists at most 100 options, each value at most 150 characters.
OPTIONS_LIMIT = 100
OPTION_VALUE_LIMIT = 150
# Prefix of our buttons' action_id: ``keel:stop`` carries the Action named "stop".
ACTION_PREFIX = "keel:"
_RETRYABLE_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)


def slack_client(
    config: SlackConfig, sessions: WebSessions, *, timeout_s: int = 30
) -> AsyncWebClient:
    if config.bot_token is None:
        raise ConfigError("slack.bot_token: required to post to Slack")
    return sessions.client(config.bot_token.get_secret_value(), config.api_url, timeout_s)


def truncated(text: str, limit: int = TEXT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - len(_TRUNCATED)] + _TRUNCATED


async def fetch_slack_identity(client: AsyncWebClient) -> SlackIdentity:
    """Who the bot is (auth.test, then users.info for the app id): call at startup only."""
    auth = await call_slack(client.auth_test())
    user = await call_slack(client.users_info(user=auth["user_id"]))
    profile = user["user"].get("profile") or {}
    return SlackIdentity(
        team_id=auth["team_id"],
        bot_user_id=auth["user_id"],
        bot_id=auth.get("bot_id") or profile.get("bot_id") or "",
        app_id=profile.get("api_app_id") or "",
    )


def rendered(
    text: str,
    actions: Sequence[Action],
    *,
    edit: bool = False,
    allowed_mentions: Collection[str] = (),
) -> dict[str, Any]:
    """The chat.postMessage / chat.update arguments that show ``text`` (and buttons)."""
    body = truncated(to_mrkdwn(text, allowed_mentions))
    if not actions:
        # An edit must send an empty list for the buttons shown before to go away.
        return {"text": body, "blocks": []} if edit else {"text": body}
    section_text = {"type": "mrkdwn", "text": truncated(body, SECTION_LIMIT)}
    section = {"type": "section", "text": section_text}
    elements = [_element(name, group) for name, group in _by_name(actions).items()]
    return {"text": body, "blocks": [section, {"type": "actions", "elements": elements}]}


def _by_name(actions: Sequence[Action]) -> dict[str, list[Action]]:
    grouped: dict[str, list[Action]] = {}
    for action in actions:
        grouped.setdefault(action.name, []).append(action)
    return grouped


def _element(name: str, group: Sequence[Action]) -> dict[str, Any]:
    """One action is a button; several under one name are the options of a choice, shown as
    a select: its options listed up to Slack's limit, searched (``block_suggestion``,
    answered by ``actions.py``) beyond it."""
    if len(group) == 1:
        return _button(group[0])
    select: dict[str, Any] = {
        "action_id": f"{ACTION_PREFIX}{name}",
        "placeholder": {"type": "plain_text", "text": "Choose…"},
    }
    # A value Slack would cut is never offered: a cut value names something else.
    options = [option_json(a.label, a.value) for a in group if len(a.value) <= OPTION_VALUE_LIMIT]
    if len(options) > OPTIONS_LIMIT:
        return select | {"type": "external_select", "min_query_length": 0}
    return select | {"type": "static_select", "options": options}


def option_json(label: str, value: str) -> dict[str, Any]:
    """A select's option as Block Kit writes it (its text is at most 75 characters)."""
    return {"text": {"type": "plain_text", "text": label[:75]}, "value": value}


def _button(action: Action) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": f"{ACTION_PREFIX}{action.name}",
        "text": {"type": "plain_text", "text": action.label[:75]},
        "value": action.value[:2000],
    }
    if action.style is not None:
        button["style"] = action.style
    return button


class SlackSurface:
    name = "slack"

    def __init__(self, clients: SlackClients, *, allowed_mentions: Collection[str] = ()) -> None:
        self.clients = clients
        # Whatever the text (Keel's or a tool's), only these users can be pinged.
        self.allowed_mentions = frozenset(allowed_mentions)

    @classmethod
    def single(cls, client: AsyncWebClient, identity: SlackIdentity | None = None) -> SlackSurface:
        """One bot token; with an identity, only that bot's messages count as our posts."""
        return cls(SingleWorkspace(client, identity or SlackIdentity("", "", "", "")))

    async def post(
        self, thread: ThreadRef, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> SlackThread:
        thread = _slack(thread).root
        client = await self.clients.client(thread.team)
        posted = await call_slack(
            client.chat_postMessage(
                channel=thread.channel,
                thread_ts=thread.thread_ts,
                metadata={"event_type": _EVENT_TYPE, "event_payload": {"key": key}},
                **rendered(text, actions, allowed_mentions=self.allowed_mentions),
            )
        )
        return thread.message(posted["ts"])

    async def start_thread(self, channel: SlackChannel, text: str, *, key: str) -> SlackThread:
        """A new top-level message in ``channel`` (an id or a #name, which Slack resolves)."""
        team = channel.team or await self._own_team(channel)
        client = await self.clients.client(team)
        posted = await call_slack(
            client.chat_postMessage(
                channel=channel.channel,
                metadata={"event_type": _EVENT_TYPE, "event_payload": {"key": key}},
                **rendered(text, (), allowed_mentions=self.allowed_mentions),
            )
        )
        return SlackThread(team, posted["channel"], posted["ts"], posted["ts"])

    async def _own_team(self, channel: SlackChannel) -> str:
        identity = await self.clients.identity(None)
        if identity is None or not identity.team_id:
            raise Permanent(
                f"fallback channel {channel} names no workspace: give it as "
                f"slack:<team id>/{channel.channel}"
            )
        return identity.team_id

    async def find_post(self, thread: ThreadRef, *, key: str) -> SlackThread | None:
        thread = _slack(thread).root
        client = await self.clients.client(thread.team)
        identity = await self.clients.identity(thread.team)
        bot_id = identity.bot_id if identity and identity.bot_id else None
        cursor: str | None = None
        while True:
            page = await call_slack(
                client.conversations_replies(
                    channel=thread.channel,
                    ts=thread.thread_ts,
                    include_all_metadata=True,
                    cursor=cursor,
                )
            )
            found = next((m for m in page["messages"] if _carries(m, key, bot_id)), None)
            if found is not None:
                return thread.message(found["ts"])
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not page.get("has_more") or not cursor:
                return None

    async def update(
        self, posted: ThreadRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
        message = _slack(posted)
        if message.message_ts is None:
            raise Permanent(f"not a Slack post: {message}")
        client = await self.clients.client(message.team)
        shown = rendered(text, actions, edit=True, allowed_mentions=self.allowed_mentions)
        await call_slack(
            client.chat_update(channel=message.channel, ts=message.message_ts, **shown)
        )

    async def react(self, target: ThreadRef, emoji: str) -> None:
        message = _slack(target)
        client = await self.clients.client(message.team)
        reaction = client.reactions_add(
            channel=message.channel, name=emoji.strip(":"), timestamp=message.target_ts
        )
        try:
            await call_slack(reaction)
        except Permanent as e:
            # Reacting is idempotent for us: the reaction being there already is the goal.
            cause = e.__cause__
            if not (isinstance(cause, SlackApiError) and _error_code(cause) == "already_reacted"):
                raise


def _carries(message: dict[str, Any], key: str, bot_id: str | None) -> bool:
    if bot_id is not None and message.get("bot_id") != bot_id:
        return False
    metadata = message.get("metadata") or {}
    payload = metadata.get("event_payload") or {}
    return bool(metadata.get("event_type") == _EVENT_TYPE and payload.get("key") == key)


def _slack(ref: ThreadRef) -> SlackThread:
    if not isinstance(ref, SlackThread):
        raise Permanent(f"not a Slack thread: {ref}")
    return ref


async def call_slack(request: Awaitable[AsyncSlackResponse]) -> AsyncSlackResponse:
    """Await one Web API call, translating its failure into Retryable or Permanent."""
    try:
        return await request
    except SlackApiError as e:
        raise translate_slack_error(e) from e
    except (TimeoutError, aiohttp.ClientError, SlackClientError) as e:
        # The request may have landed (a dropped response): the outbox reconciles by key.
        raise Retryable(f"Slack transport error, outcome unknown: {type(e).__name__}") from e


def translate_slack_error(error: SlackApiError) -> Retryable | Permanent:
    code = _error_code(error)
    status = getattr(error.response, "status_code", 200)
    message = f"Slack {code} (HTTP {status})"
    if status == 429 or code == "ratelimited":
        return Retryable(message, retry_after_s=_retry_after(error.response))
    if status >= 500 or code in _RETRYABLE_ERRORS:
        return Retryable(message)
    return Permanent(message)


def _error_code(error: SlackApiError) -> str:
    data = getattr(error.response, "data", None)
    return str(data.get("error", "unknown_error")) if isinstance(data, dict) else "unknown_error"


def _retry_after(response: Any) -> float | None:
    headers = {str(k).lower(): v for k, v in (getattr(response, "headers", None) or {}).items()}
    value = headers.get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
