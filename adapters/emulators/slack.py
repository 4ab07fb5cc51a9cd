"""An in-memory emulator of the part of Slack's Web API that Keel uses.

Methods answer under ``/api/<method>`` with Slack's envelope (``ok``/``error``, HTTP 200
even for errors, like Slack); shapes follow Slack's Web API description and its examples
(slackapi/slack-api-specs; the tests check against it, trimmed, in tests/fixtures). Arguments
are read from the query string, a form body or a JSON body, since slack_sdk uses all three.
Where Slack's behaviour is loosely specified the emulator is strict: channels must be
seeded, and a ``thread_ts`` must name a message in that channel.

Files shared in messages are served at ``/files-pri/<team>-<file id>/download/<name>`` to a
valid bearer token only (anyone else gets a sign-in page, as from Slack); ``refuse(method,
code)`` makes a method answer an error such as ``missing_scope``.
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
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from adapters.emulators.faults import EmulatorState, FaultRaised, RecordingMiddleware, gate_of
from adapters.emulators.slack_blocks import InvalidBlocks, check_blocks
from adapters.emulators.slack_socket import SocketHub

Args = dict[str, Any]


class SlackError(Exception):
    """A Slack ``{"ok": false, "error": code}`` answer; ``extra`` adds fields such as
    ``needed`` and ``provided`` of a ``missing_scope``."""

    def __init__(self, code: str, **extra: str) -> None:
        super().__init__(code)
        self.code = code
        self.extra = extra


@dataclass(slots=True)
class SlackUser:
    user_id: str
    name: str
    real_name: str
    is_bot: bool = False


@dataclass(slots=True)
class SlackFile:
    """A file shared in a message; its bytes are served only with a valid bearer token."""

    file_id: str
    name: str
    mimetype: str
    filetype: str
    content: bytes
    user: str
    created: int
    # Slack lists some files (from another workspace, over a plan's limit) by id only, with
    # ``"file_access": "check_file_info"``: only files.info gives their details.
    check_file_info: bool = False


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
    files: list[SlackFile] = field(default_factory=list)


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
    ims: dict[str, str] = field(default_factory=dict)  # direct message channel -> the person
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
    # Web API methods that answer with an error instead: method -> (code, extra fields).
    refusals: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    # Where the emulator is reached, as the last request saw it (file URLs point here).
    base_url: str = "http://127.0.0.1"
    _last_micros: int = 0
    _file_ids: int = 0
    # Lookups by (channel, ts) and by (channel, thread root), built from ``messages`` as it
    # grows (messages are only appended, and a message's channel, ts and thread never
    # change): a scan of every message per call made a bench of 10k threads quadratic.
    _by_ts: dict[tuple[str, str], SlackMessage] = field(default_factory=dict)
    _in_thread: dict[tuple[str, str], list[SlackMessage]] = field(default_factory=dict)
    _indexed: int = 0

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

    def add_im(self, channel_id: str, user: str) -> None:
        """A direct message between the bot and ``user``."""
        self.ims[channel_id] = user

    def next_ts(self) -> str:
        """A unique, increasing Slack timestamp (seconds.microseconds)."""
        self._last_micros = max(time.time_ns() // 1000, self._last_micros + 1)
        return f"{self._last_micros // 1_000_000}.{self._last_micros % 1_000_000:06d}"

    def seed_message(
        self,
        channel: str,
        text: str,
        *,
        user: str,
        thread_ts: str | None = None,
        files: list[SlackFile] | None = None,
    ) -> str:
        """Add a message as if a person had posted it; returns its ts."""
        message = SlackMessage(
            channel, self.next_ts(), text, user, thread_ts=thread_ts, files=files or []
        )
        self.messages.append(message)
        return message.ts

    def new_file(
        self, name: str, mimetype: str, content: bytes, *, user: str, check_file_info: bool = False
    ) -> SlackFile:
        """A file to attach to a seeded message (``seed_message(..., files=[...])``)."""
        self._file_ids += 1
        filetype = name.rpartition(".")[2].lower() if "." in name else "binary"
        return SlackFile(
            f"F0KEEL{self._file_ids:04d}", name, mimetype, filetype, content, user,
            int(time.time()), check_file_info,
        )

    def refuse(self, method: str, code: str, **extra: str) -> None:
        """Make ``method`` answer ``{"ok": false, "error": code, **extra}`` from now on."""
        self.refusals[method] = (code, extra)

    def file(self, file_id: str) -> SlackFile | None:
        found = (f for m in self.messages for f in m.files if f.file_id == file_id)
        return next(found, None)

    def find(self, channel: str, ts: str) -> SlackMessage | None:
        self._index()
        return self._by_ts.get((channel, ts))

    def thread(self, channel: str, thread_ts: str) -> list[SlackMessage]:
        """The message ``thread_ts`` and every message whose thread it roots, oldest first."""
        self._index()
        in_thread = list(self._in_thread.get((channel, thread_ts), ()))
        itself = self._by_ts.get((channel, thread_ts))
        if itself is not None and not any(m is itself for m in in_thread):
            in_thread.append(itself)
        return sorted(in_thread, key=lambda m: m.ts)

    def _index(self) -> None:
        if self._indexed > len(self.messages):  # the list was replaced or cut: start again
            self._by_ts.clear()
            self._in_thread.clear()
            self._indexed = 0
        for m in self.messages[self._indexed:]:
            self._by_ts.setdefault((m.channel, m.ts), m)
            if m.thread_ts is not None:
                self._in_thread.setdefault((m.channel, m.thread_ts), []).append(m)
        self._indexed = len(self.messages)

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
    if message.files:
        body["files"] = [_listed_file_json(state, f) for f in message.files]
        body["upload"] = False
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
    if channel not in state.channels and channel not in state.ims:
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


def _posting_channel(state: SlackState, args: Args) -> str:
    """As on Slack, chat.postMessage also takes a channel's ``#name``; the answer names its id."""
    name = str(args.get("channel") or "")
    if not name.startswith("#"):
        return _channel(state, args)
    found = [cid for cid, known in state.channels.items() if known == name.removeprefix("#")]
    if not found:
        raise SlackError("channel_not_found")
    return found[0]


def chat_post_message(state: SlackState, args: Args) -> Args:
    channel = _posting_channel(state, args)
    text = str(args.get("text") or "")
    blocks = _parsed_json(args.get("blocks"))
    if not text and not blocks:
        raise SlackError("no_text")
    check_blocks(blocks)
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
        message.blocks = check_blocks(_parsed_json(args["blocks"]))
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


def _file_json(state: SlackState, file: SlackFile) -> Args:
    private = f"{state.base_url}/files-pri/{state.team_id}-{file.file_id}/{file.name}"
    download = f"{state.base_url}/files-pri/{state.team_id}-{file.file_id}/download/{file.name}"
    return {
        "id": file.file_id,
        "created": file.created,
        "timestamp": file.created,
        "name": file.name,
        "title": file.name,
        "mimetype": file.mimetype,
        "filetype": file.filetype,
        "pretty_type": file.filetype.upper(),
        "user": file.user,
        "editable": False,
        "size": len(file.content),
        "mode": "hosted",
        "is_external": False,
        "external_type": "",
        "is_public": False,
        "public_url_shared": False,
        "display_as_bot": False,
        "username": "",
        "url_private": private,
        "url_private_download": download,
        "permalink": f"https://keel-emulated.slack.com/files/{file.user}/{file.file_id}/{file.name}",
        "has_rich_preview": False,
    }


def _listed_file_json(state: SlackState, file: SlackFile) -> Args:
    if file.check_file_info:
        return {"id": file.file_id, "file_access": "check_file_info", "created": file.created}
    return _file_json(state, file)


def _in_range(message: SlackMessage, args: Args) -> bool:
    """Slack's ``oldest``/``latest`` window; ``inclusive`` keeps the bounds themselves."""
    inclusive = _flag(args.get("inclusive"))
    ts = float(message.ts)
    if args.get("oldest") not in (None, ""):
        oldest = float(args["oldest"])
        if ts < oldest or (ts == oldest and not inclusive):
            return False
    if args.get("latest") not in (None, ""):
        latest = float(args["latest"])
        if ts > latest or (ts == latest and not inclusive):
            return False
    return True


def _cursor(ts: str) -> str:
    # Slack's cursors are opaque; its own decode to "next_ts:<ts>", and so do these.
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def _after_cursor(args: Args) -> str | None:
    cursor = args.get("cursor")
    if cursor in (None, ""):
        return None
    try:
        decoded = base64.b64decode(str(cursor), validate=True).decode()
    except ValueError as e:
        raise SlackError("invalid_cursor") from e
    if not decoded.startswith("next_ts:"):
        raise SlackError("invalid_cursor")
    return decoded.removeprefix("next_ts:")


def conversations_replies(state: SlackState, args: Args) -> Args:
    channel = _channel(state, args)
    thread = state.thread(channel, _required(args, "ts", "thread_not_found"))
    if not thread:
        raise SlackError("thread_not_found")
    root, replies = thread[0], thread[1:]
    with_metadata = _flag(args.get("include_all_metadata"))
    listed = [m for m in thread if _in_range(m, args)]
    start = _after_cursor(args)
    if start is not None:
        listed = [m for m in listed if float(m.ts) >= float(start)]
    limit = max(1, min(int(args.get("limit") or 1000), 1000))
    page, rest = listed[:limit], listed[limit:]
    messages = []
    for message in page:
        if message is root:
            body = _root_json(state, root, replies)
            if with_metadata and root.metadata is not None:
                body["metadata"] = root.metadata
        else:
            body = _message_json(state, message, metadata=with_metadata)
        messages.append(body)
    answer: Args = {"ok": True, "messages": messages, "has_more": bool(rest)}
    if rest:
        answer["response_metadata"] = {"next_cursor": _cursor(rest[0].ts)}
    return answer


def conversations_info(state: SlackState, args: Args) -> Args:
    channel = _channel(state, args)
    if channel in state.ims:
        return {"ok": True, "channel": _im_json(channel, state.ims[channel])}
    name = state.channels[channel]
    return {
        "ok": True,
        "channel": {
            "id": channel,
            "name": name,
            "name_normalized": name,
            "created": 1449252889,
            "creator": state.bot_user_id,
            "is_archived": False,
            "is_channel": True,
            "is_general": name == "general",
            "is_group": False,
            "is_im": False,
            "is_member": True,
            "is_mpim": False,
            "is_org_shared": False,
            "is_private": False,
            "is_shared": False,
            "topic": {"value": "", "creator": "", "last_set": 0},
            "purpose": {"value": "", "creator": "", "last_set": 0},
        },
    }


def _im_json(channel: str, user: str) -> Args:
    return {
        "id": channel,
        "created": 1449252889,
        "is_im": True,
        "is_org_shared": False,
        "user": user,
        "priority": 0,
        "is_user_deleted": False,
    }


def chat_get_permalink(state: SlackState, args: Args) -> Args:
    channel = _channel(state, args)
    message = state.find(channel, _required(args, "message_ts", "message_not_found"))
    if message is None:
        raise SlackError("message_not_found")
    link = f"https://keel-emulated.slack.com/archives/{channel}/p{message.ts.replace('.', '')}"
    if message.thread_ts is not None and message.thread_ts != message.ts:
        link += f"?thread_ts={message.thread_ts}&cid={channel}"
    return {"ok": True, "channel": channel, "permalink": link}


def files_info(state: SlackState, args: Args) -> Args:
    file = state.file(_required(args, "file", "file_not_found"))
    if file is None:
        raise SlackError("file_not_found")
    return {"ok": True, "file": _file_json(state, file), "comments": []}


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
    "conversations.info": conversations_info,
    "chat.getPermalink": chat_get_permalink,
    "files.info": files_info,
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
    if method in state.refusals:
        code, extra = state.refusals[method]
        raise SlackError(code, **extra)
    state.base_url = str(request.base_url).rstrip("/")
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


_LOGIN_PAGE = "<!DOCTYPE html><html><body>Sign in to Keel Emulated</body></html>"


async def _download(state: SlackState, request: Request, file_id: str) -> Response:
    """A file's bytes for a valid bearer token; like Slack, a login page (HTML) otherwise."""
    token = _token(request, {})
    file = state.file(file_id)
    if token not in state.tokens or file is None:
        return HTMLResponse(_LOGIN_PAGE)
    await gate_of(request.scope).enter("files.download")
    return Response(file.content, media_type=file.mimetype)


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
            return JSONResponse({"ok": False, "error": e.code, **e.extra})
        except InvalidBlocks as e:
            return JSONResponse({"ok": False, "error": "invalid_blocks", "errors": e.errors})
        except FaultRaised as raised:
            return _fault_response(raised)

    @app.get("/files-pri/{team_file}/download/{name}")
    async def download(team_file: str, name: str, request: Request) -> Response:
        try:
            return await _download(state, request, team_file.partition("-")[2])
        except FaultRaised as raised:
            return _fault_response(raised)

    return app
