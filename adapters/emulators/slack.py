"""An in-memory emulator of the part of Slack's Web API that Keel uses.

Methods answer under ``/api/<method>`` with Slack's envelope (``ok``/``error``, HTTP 200
even for errors, like Slack); shapes follow ../shared/corpora/slack (the Web API OpenAPI
and its examples). Arguments are read from the query string, a form body or a JSON body,
since slack_sdk uses all three. Where Slack's behaviour is loosely specified the emulator is
strict: channels must be seeded, and a ``thread_ts`` must name a message in that channel.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from adapters.emulators.faults import EmulatorState, FaultRaised, RecordingMiddleware, gate_of
from adapters.emulators.slack_socket import SocketHub

Args = dict[str, Any]


class SlackError(Exception):
    """A Slack ``{"ok": false, "error": code}`` answer."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass(slots=True)
class SlackUser:
    user_id: str
    name: str
    real_name: str
    is_bot: bool = False


@dataclass(slots=True)
class SlackMessage:
    channel: str
    ts: str
    text: str
    user: str
    bot_id: str | None = None
    thread_ts: str | None = None
    metadata: dict[str, Any] | None = None
    blocks: list[Any] | None = None
    reactions: dict[str, list[str]] = field(default_factory=dict)
    edited: bool = False


@dataclass(slots=True)
class SlackOAuth:
    """The app's OAuth side: its credentials, the workspace a person approves the install
    in, and codes and refresh tokens given out. ``token_lifetime_s`` turns on rotation."""

    client_id: str = "1111.2222"
    client_secret: str = "emulated-client-secret"
    approving_team: str | None = None
    token_lifetime_s: int | None = None
    codes: dict[str, str] = field(default_factory=dict)  # code -> team
    refresh_tokens: dict[str, str] = field(default_factory=dict)  # refresh token -> team
    expires_at: dict[str, float] = field(default_factory=dict)  # access token -> epoch


@dataclass(slots=True)
class SlackState(EmulatorState):
    """The workspace: one team, its users and channels, every message; test helpers."""

    team_id: str = "T0KEEL0001"
    team_name: str = "Keel Emulated"
    bot_user_id: str = "U0KEELBOT1"
    bot_id: str = "B0KEELBOT1"
    app_id: str = "A0KEELAPP1"
    bot_name: str = "keel"
    tokens: set[str] = field(default_factory=lambda: {"xoxb-keel-emulated"})
    users: dict[str, SlackUser] = field(default_factory=dict)
    channels: dict[str, str] = field(default_factory=lambda: {"C0KEELGEN1": "general"})
    messages: list[SlackMessage] = field(default_factory=list)
    # Socket Mode: app-level tokens, and the websocket side (``slack_socket.SocketHub``).
    app_tokens: set[str] = field(default_factory=lambda: {"xapp-keel-emulated"})
    socket: SocketHub | None = None
    # Other workspaces: a token or channel not named here belongs to ``team_id``.
    token_teams: dict[str, str] = field(default_factory=dict)
    channel_teams: dict[str, str] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    ephemeral: list[SlackMessage] = field(default_factory=list)
    # (method, token) of every authenticated call, to show whose token each call carried.
    token_uses: list[tuple[str, str]] = field(default_factory=list)
    oauth: SlackOAuth = field(default_factory=lambda: SlackOAuth())
    _last_micros: int = 0

    def __post_init__(self) -> None:
        self.add_user(self.bot_user_id, self.bot_name, real_name="Keel", is_bot=True)

    def add_user(
        self, user_id: str, name: str, *, real_name: str = "", is_bot: bool = False
    ) -> None:
        self.users[user_id] = SlackUser(user_id, name, real_name or name, is_bot)

    def add_channel(self, channel_id: str, name: str, *, team_id: str | None = None) -> None:
        self.channels[channel_id] = name
        if team_id is not None:
            self.channel_teams[channel_id] = team_id

    def add_token(self, token: str, team_id: str) -> None:
        """A bot token of workspace ``team_id``: it sees only that workspace's channels."""
        self.tokens.add(token)
        self.token_teams[token] = team_id

    def team_of_token(self, token: str) -> str:
        return self.token_teams.get(token, self.team_id)

    def revoke_team(self, team_id: str) -> None:
        """The app is uninstalled there: every token of that workspace stops working."""
        self.revoked |= {t for t in self.tokens if self.team_of_token(t) == team_id}

    def next_ts(self) -> str:
        """A unique, increasing Slack timestamp (seconds.microseconds)."""
        self._last_micros = max(time.time_ns() // 1000, self._last_micros + 1)
        return f"{self._last_micros // 1_000_000}.{self._last_micros % 1_000_000:06d}"

    def seed_message(
        self, channel: str, text: str, *, user: str, thread_ts: str | None = None
    ) -> str:
        """Add a message as if a person had posted it; returns its ts."""
        message = SlackMessage(channel, self.next_ts(), text, user, thread_ts=thread_ts)
        self.messages.append(message)
        return message.ts

    def find(self, channel: str, ts: str) -> SlackMessage | None:
        return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    def thread(self, channel: str, thread_ts: str) -> list[SlackMessage]:
        in_thread = [
            m
            for m in self.messages
            if m.channel == channel and (m.ts == thread_ts or m.thread_ts == thread_ts)
        ]
        return sorted(in_thread, key=lambda m: m.ts)

    def bot_posts(self, channel: str | None = None) -> list[SlackMessage]:
        return [
            m for m in self.messages if m.bot_id == self.bot_id and channel in (None, m.channel)
        ]


def _message_json(state: SlackState, message: SlackMessage, *, metadata: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "message",
        "user": message.user,
        "text": message.text,
        "ts": message.ts,
        "team": state.team_id,
    }
    if message.bot_id is not None:
        body["bot_id"] = message.bot_id
    if message.blocks is not None:
        body["blocks"] = message.blocks
    if message.thread_ts is not None and message.thread_ts != message.ts:
        body["thread_ts"] = message.thread_ts
        root = state.find(message.channel, message.thread_ts)
        body["parent_user_id"] = root.user if root else message.user
    if message.reactions:
        # Slack returns reactions on messages although the 2021 description leaves them out.
        body["reactions"] = [
            {"name": name, "users": users, "count": len(users)}
            for name, users in message.reactions.items()
        ]
    if metadata and message.metadata is not None:
        body["metadata"] = message.metadata
    return body


def _root_json(state: SlackState, root: SlackMessage, replies: list[SlackMessage]) -> Args:
    body = _message_json(state, root, metadata=False)
    if replies:
        users = list(dict.fromkeys(r.user for r in replies))
        body |= {
            "thread_ts": root.ts,
            "reply_count": len(replies),
            "reply_users": users,
            "reply_users_count": len(users),
            "latest_reply": replies[-1].ts,
            "subscribed": False,
        }
    return body


def _required(args: Args, name: str, missing: str = "invalid_arguments") -> str:
    value = args.get(name)
    if value in (None, ""):
        raise SlackError(missing)
    return str(value)


def _channel(state: SlackState, args: Args) -> str:
    channel = _required(args, "channel", "channel_not_found")
    if channel not in state.channels:
        raise SlackError("channel_not_found")
    return channel


def _parsed_json(value: Any) -> Any:
    # Form bodies carry structured arguments as JSON strings; JSON bodies carry them as-is.
    if isinstance(value, str) and value:
        try:
            return json.loads(value)
        except ValueError as e:
            raise SlackError("invalid_json") from e
    return value


def _flag(value: Any) -> bool:
    return value in (True, 1, "1", "true", "True")


def auth_test(state: SlackState, args: Args, token: str) -> Args:
    """Who the token is: the bot of the workspace that token was issued in."""
    return {
        "ok": True,
        "url": "https://keel-emulated.slack.com/",
        "team": state.team_name,
        "user": state.bot_name,
        "team_id": state.team_of_token(token),
        "user_id": state.bot_user_id,
        "bot_id": state.bot_id,
        "is_enterprise_install": False,
    }


def apps_connections_open(state: SlackState, args: Args, token: str) -> Args:
    if state.socket is None:
        raise SlackError("not_allowed_token_type")
    return {"ok": True, "url": state.socket.open_url()}


def chat_post_ephemeral(state: SlackState, args: Args, token: str) -> Args:
    """A message only ``user`` sees; kept apart from the channel's messages."""
    channel = _channel(state, args)
    user = _required(args, "user", "user_not_in_channel")
    text = str(args.get("text") or "")
    if not text and not args.get("blocks"):
        raise SlackError("no_text")
    message = SlackMessage(channel, state.next_ts(), text, user, bot_id=state.bot_id)
    message.thread_ts = str(args["thread_ts"]) if args.get("thread_ts") else None
    state.ephemeral.append(message)
    return {"ok": True, "message_ts": message.ts}


def oauth_v2_access(state: SlackState, args: Args) -> Args:
    """Exchange an install code, or a refresh token when rotation is on, for a bot token."""
    oauth = state.oauth
    if (args.get("client_id"), args.get("client_secret")) != (oauth.client_id, oauth.client_secret):
        raise SlackError("invalid_client_id")
    if args.get("grant_type") == "refresh_token":
        team = oauth.refresh_tokens.pop(str(args.get("refresh_token")), None)
        if team is None:
            raise SlackError("invalid_refresh_token")
        # A token that rotated once keeps rotating (12 hours, Slack's lifetime, by default).
        return _issue_token(state, team, oauth.token_lifetime_s or 43_200)
    team = oauth.codes.pop(str(args.get("code")), None)
    if team is None:
        raise SlackError("invalid_code")
    return _issue_token(state, team, oauth.token_lifetime_s)


def _issue_token(state: SlackState, team: str, lifetime_s: int | None) -> Args:
    oauth = state.oauth
    rotating = lifetime_s is not None
    token = ("xoxe.xoxb-" if rotating else "xoxb-") + f"{team}-{uuid.uuid4().hex[:12]}"
    state.add_token(token, team)
    answer: Args = {
        "ok": True,
        "app_id": state.app_id,
        "authed_user": {"id": "U0INSTALLR"},
        "scope": "app_mentions:read,chat:write,reactions:write",
        "token_type": "bot",
        "access_token": token,
        "bot_user_id": state.bot_user_id,
        "team": {"id": team, "name": f"Workspace {team}"},
        "enterprise": None,
        "is_enterprise_install": False,
    }
    if lifetime_s is not None:
        refresh = f"xoxe-1-{uuid.uuid4().hex}"
        oauth.refresh_tokens[refresh] = team
        oauth.expires_at[token] = time.time() + lifetime_s
        answer |= {"refresh_token": refresh, "expires_in": lifetime_s}
    return answer


def _thread_root(state: SlackState, channel: str, thread_ts: Any) -> str | None:
    if thread_ts in (None, ""):
        return None
    parent = state.find(channel, str(thread_ts))
    if parent is None:
        raise SlackError("thread_not_found")
    return parent.thread_ts or parent.ts


def chat_post_message(state: SlackState, args: Args) -> Args:
    channel = _channel(state, args)
    text = str(args.get("text") or "")
    blocks = _parsed_json(args.get("blocks"))
    if not text and not blocks:
        raise SlackError("no_text")
    message = SlackMessage(
        channel=channel,
        ts=state.next_ts(),
        text=text,
        user=state.bot_user_id,
        bot_id=state.bot_id,
        thread_ts=_thread_root(state, channel, args.get("thread_ts")),
        metadata=_parsed_json(args.get("metadata")),
        blocks=blocks,
    )
    state.messages.append(message)
    return {
        "ok": True,
        "channel": channel,
        "ts": message.ts,
        "message": _message_json(state, message, metadata=True),
    }


def chat_update(state: SlackState, args: Args) -> Args:
    channel = _channel(state, args)
    message = state.find(channel, _required(args, "ts", "message_not_found"))
    if message is None:
        raise SlackError("message_not_found")
    if message.bot_id != state.bot_id:
        raise SlackError("cant_update_message")
    if "text" in args:
        message.text = str(args["text"])
    if "blocks" in args:
        message.blocks = _parsed_json(args["blocks"])
    if "metadata" in args:
        message.metadata = _parsed_json(args["metadata"])
    message.edited = True
    return {
        "ok": True,
        "channel": channel,
        "ts": message.ts,
        "text": message.text,
        "message": _message_json(state, message, metadata=True),
    }


def reactions_add(state: SlackState, args: Args) -> Args:
    channel = _channel(state, args)
    name = _required(args, "name", "invalid_name")
    message = state.find(channel, _required(args, "timestamp", "no_item_specified"))
    if message is None:
        raise SlackError("message_not_found")
    reacted = message.reactions.setdefault(name, [])
    if state.bot_user_id in reacted:
        raise SlackError("already_reacted")
    reacted.append(state.bot_user_id)
    return {"ok": True}


def conversations_replies(state: SlackState, args: Args) -> Args:
    channel = _channel(state, args)
    thread = state.thread(channel, _required(args, "ts", "thread_not_found"))
    if not thread:
        raise SlackError("thread_not_found")
    root, replies = thread[0], thread[1:]
    with_metadata = _flag(args.get("include_all_metadata"))
    messages = [_root_json(state, root, replies)]
    if with_metadata and root.metadata is not None:
        messages[0]["metadata"] = root.metadata
    messages += [_message_json(state, m, metadata=with_metadata) for m in replies]
    return {"ok": True, "messages": messages, "has_more": False}


def users_info(state: SlackState, args: Args) -> Args:
    user = state.users.get(_required(args, "user", "user_not_found"))
    if user is None:
        raise SlackError("user_not_found")
    profile = {
        "real_name": user.real_name,
        "real_name_normalized": user.real_name,
        "display_name": user.name,
        "display_name_normalized": user.name,
        "team": state.team_id,
    }
    if user.is_bot:
        profile |= {"bot_id": state.bot_id, "api_app_id": state.app_id}
    return {
        "ok": True,
        "user": {
            "id": user.user_id,
            "team_id": state.team_id,
            "name": user.name,
            "real_name": user.real_name,
            "deleted": False,
            "is_bot": user.is_bot,
            "is_app_user": False,
            "is_admin": False,
            "is_owner": False,
            "updated": 1502138686,
            "tz": "Etc/UTC",
            "profile": profile,
        },
    }


METHODS: dict[str, Callable[[SlackState, Args], Args]] = {
    "chat.postMessage": chat_post_message,
    "chat.update": chat_update,
    "reactions.add": reactions_add,
    "conversations.replies": conversations_replies,
    "users.info": users_info,
}
# Methods whose answer depends on who calls: they are given the caller's token.
CALLER_METHODS: dict[str, Callable[[SlackState, Args, str], Args]] = {
    "auth.test": auth_test,
    "apps.connections.open": apps_connections_open,
    "chat.postEphemeral": chat_post_ephemeral,
}
_APP_TOKEN_METHODS = frozenset({"apps.connections.open"})


async def _arguments(request: Request) -> Args:
    args: Args = dict(request.query_params)
    content_type = request.headers.get("content-type", "")
    if "json" in content_type:
        try:
            body = await request.json()
        except ValueError as e:
            raise SlackError("invalid_json") from e
        if not isinstance(body, dict):
            raise SlackError("json_not_object")
        args |= body
    elif "x-www-form-urlencoded" in content_type:
        args |= dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))
    return args


def _token(request: Request, args: Args) -> str | None:
    header = request.headers.get("authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ")
    token = args.get("token")
    return str(token) if token else None


def _fault_response(raised: FaultRaised) -> JSONResponse:
    if raised.fault.kind == "429":
        return JSONResponse(
            {"ok": False, "error": "ratelimited"},
            status_code=429,
            headers={"Retry-After": str(raised.fault.retry_after)},
        )
    return JSONResponse({"ok": False, "error": "internal_error"}, status_code=500)


async def _answer(state: SlackState, method: str, request: Request) -> Args:
    if method not in METHODS and method not in CALLER_METHODS and method != "oauth.v2.access":
        raise SlackError("unknown_method")
    args = await _arguments(request)
    if method == "oauth.v2.access":
        await gate_of(request.scope).enter(method)
        return oauth_v2_access(state, args | _basic_auth(request))
    token = _token(request, args)
    _check_token(state, method, token)
    assert token is not None
    _check_workspace(state, args, token)
    state.token_uses.append((method, token))
    await gate_of(request.scope).enter(method)
    caller = CALLER_METHODS.get(method)
    return caller(state, args, token) if caller else METHODS[method](state, args)


def _check_token(state: SlackState, method: str, token: str | None) -> None:
    if token is None:
        raise SlackError("not_authed")
    app_token = token in state.app_tokens
    if app_token != (method in _APP_TOKEN_METHODS):
        known = app_token or token in state.tokens
        raise SlackError("not_allowed_token_type" if known else "invalid_auth")
    if app_token:
        return
    if token in state.revoked:
        raise SlackError("token_revoked")
    if token not in state.tokens:
        raise SlackError("invalid_auth")
    expires_at = state.oauth.expires_at.get(token)
    if expires_at is not None and time.time() >= expires_at:
        raise SlackError("token_expired")


def _check_workspace(state: SlackState, args: Args, token: str) -> None:
    """A token sees its own workspace's channels only, as on Slack."""
    channel = args.get("channel")
    owner = state.channel_teams.get(str(channel), state.team_id)
    if channel in state.channels and owner != state.team_of_token(token):
        raise SlackError("channel_not_found")


def _basic_auth(request: Request) -> Args:
    header = request.headers.get("authorization", "")
    if not header.startswith("Basic "):
        return {}
    client_id, _, secret = base64.b64decode(header.removeprefix("Basic ")).decode().partition(":")
    return {"client_id": client_id, "client_secret": secret}


def _authorize_page(state: SlackState, request: Request) -> Response:
    """The person approves the install in ``oauth.approving_team``: back to the app's
    redirect URI with a one-time code and the state it sent."""
    query = request.query_params
    if query.get("client_id") != state.oauth.client_id:
        return JSONResponse({"ok": False, "error": "invalid_client_id"}, status_code=400)
    code = uuid.uuid4().hex
    state.oauth.codes[code] = state.oauth.approving_team or state.team_id
    target = query.get("redirect_uri") or ""
    separator = "&" if "?" in target else "?"
    return RedirectResponse(
        f"{target}{separator}{urlencode({'code': code, 'state': query.get('state', '')})}",
        status_code=302,
    )


def create_slack_app(state: SlackState) -> FastAPI:
    """The emulator app; serve it with ``adapters.emulators.server.serve``."""
    app = FastAPI(title="Slack Web API emulator")
    app.add_middleware(RecordingMiddleware, state=state)

    @app.get("/oauth/v2/authorize")
    async def authorize(request: Request) -> Response:
        return _authorize_page(state, request)

    @app.api_route("/api/{method}", methods=["GET", "POST"])
    async def call(method: str, request: Request) -> JSONResponse:
        try:
            return JSONResponse(await _answer(state, method, request))
        except SlackError as e:
            return JSONResponse({"ok": False, "error": e.code})
        except FaultRaised as raised:
            return _fault_response(raised)

    return app
