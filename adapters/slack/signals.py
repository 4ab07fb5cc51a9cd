"""Slack Events API envelopes → Signals. Pure: no I/O, no clock, never raises.

Only the fields Keel reads are modelled; a payload whose fields do not fit is acknowledged and
dropped as `unsupported` with the reason, so a strange delivery can never fail the request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints, ValidationError

from routing.signal import (
    STOP_REACTIONS,
    Actor,
    Command,
    Ignored,
    Signal,
    SignalKind,
    find_links,
    parse_command,
    slack_message_fact,
)
from runtime.threads import SlackThread

# Slack sends "" for absent ids in some payloads; an empty id identifies nothing.
OptionalId = Annotated[str | None, BeforeValidator(lambda value: value or None)]
RequiredId = Annotated[str, StringConstraints(min_length=1)]
# Ids and timestamps that go into thread refs and dedupe keys must not smuggle in separators.
RefId = Annotated[str, StringConstraints(pattern=r"^[^\s/:]+$")]
OptionalRefId = Annotated[RefId | None, BeforeValidator(lambda value: value or None)]
Timestamp = Annotated[str, StringConstraints(pattern=r"^\d+\.\d+$")]
OptionalTimestamp = Annotated[Timestamp | None, BeforeValidator(lambda value: value or None)]

# Message shapes Keel reads as a person (or bot) speaking; other subtypes are housekeeping.
_SPOKEN_SUBTYPES = frozenset({None, "thread_broadcast", "file_share", "bot_message"})


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    """Who "we" are in the workspace, from auth.test; used to recognise our own events."""

    team_id: str
    bot_user_id: str
    bot_id: str
    app_id: str


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Envelope(_Payload):
    team_id: OptionalRefId = None
    event_id: RequiredId
    event: dict[str, Any]


class _BotProfile(_Payload):
    name: str | None = None
    app_id: OptionalId = None


class _UserProfile(_Payload):
    display_name: str | None = None
    real_name: str | None = None
    name: str | None = None


class _Message(_Payload):
    type: str
    subtype: OptionalId = None
    user: OptionalId = None
    bot_id: OptionalId = None
    app_id: OptionalId = None
    username: str | None = None
    bot_profile: _BotProfile | None = None
    user_profile: _UserProfile | None = None
    text: str | None = None
    ts: Timestamp
    thread_ts: OptionalTimestamp = None
    channel: RefId
    channel_type: OptionalId = None


class _ReactionItem(_Payload):
    type: str
    channel: OptionalRefId = None
    ts: OptionalTimestamp = None


class _Reaction(_Payload):
    user: RequiredId
    reaction: RefId
    item: _ReactionItem
    event_ts: Timestamp


_M = TypeVar("_M", bound=_Payload)


@dataclass(frozen=True, slots=True)
class _Context:
    team: str
    event_id: str
    identity: SlackIdentity
    received_at: datetime


def signal_from_slack_event(
    envelope: Mapping[str, Any], identity: SlackIdentity, *, received_at: datetime
) -> Signal | Ignored:
    """Translate one Events API envelope (`event_callback`) into a Signal, or say why not."""
    # url_verification and app_rate_limited are answered by the route, not routed.
    envelope_type = envelope.get("type") if isinstance(envelope, Mapping) else None
    if envelope_type != "event_callback":
        return Ignored("unsupported", f"envelope type {envelope_type!r}")
    outer = _parse(_Envelope, envelope)
    if isinstance(outer, Ignored):
        return outer
    team = outer.team_id or identity.team_id
    ctx = _Context(team, outer.event_id, identity, received_at)
    match event_type := outer.event.get("type"):
        case "app_mention" | "message":
            return _from_message(outer.event, ctx)
        case "reaction_added":
            return _from_reaction(outer.event, ctx)
        case _:
            return Ignored("unsupported", f"event type {event_type!r}")


def foreign_workspace(own_team: str | None, claimed_team: object) -> Ignored | None:
    """Why a delivery for ``claimed_team`` is not ours, if it is not: Keel was authorised
    for ``own_team`` only. With one bot token (no OAuth) a Slack app may still be installed
    elsewhere, and its signed events come with the same secret; they must start nothing. In
    OAuth mode the installation is found by the delivery's own team, so the two agree."""
    if own_team and claimed_team == own_team:
        return None
    return Ignored(
        "unauthorised",
        f"foreign workspace: event from Slack workspace {claimed_team!r}; Keel's bot token "
        f"is for {own_team!r}",
    )


def _from_message(event: dict[str, Any], ctx: _Context) -> Signal | Ignored:
    subtype = event.get("subtype") or None
    if not isinstance(subtype, str | None):
        return Ignored("unsupported", f"message subtype of type {type(subtype).__name__}")
    if subtype == "message_changed":
        return Ignored("edited", "message_changed")
    if subtype not in _SPOKEN_SUBTYPES:
        return Ignored("unsupported", f"message subtype {subtype!r}")
    message = _parse(_Message, event)
    if isinstance(message, Ignored):
        return message
    actor = _message_actor(message, ctx.identity)
    if actor is None:
        return Ignored("unsupported", "message has neither user nor bot_id")
    return _message_signal(message, actor, ctx)


def _message_signal(message: _Message, actor: Actor, ctx: _Context) -> Signal | Ignored:
    text = message.text or ""
    mention = _mention_pattern(ctx.identity.bot_user_id)
    classified = _classify(message, actor, mentioned=mention.search(text) is not None)
    if isinstance(classified, Ignored):
        return classified
    kind, addressed = classified
    thread = SlackThread(ctx.team, message.channel, message.thread_ts or message.ts)
    return Signal(
        provider="slack",
        delivery_id=ctx.event_id,
        kind=kind,
        thread_ref=thread,
        objective_key=str(thread),
        actor=actor,
        text=_strip_leading_mention(text, mention),
        addresses_bot=addressed,
        command=parse_command(mention.sub(" ", text)),
        links=find_links(text),
        received_at=ctx.received_at,
        dedupe_key=slack_message_fact(ctx.team, message.channel, message.ts),
        event_action=message.type,
        # The message itself: the brief reads it back, and the 👀 goes on it.
        message=thread.message(message.ts),
    )


def _classify(
    message: _Message, actor: Actor, *, mentioned: bool
) -> tuple[SignalKind, bool] | Ignored:
    """The kind of message and whether it is said to the bot."""
    # In a direct message every line is said to the bot; no mention needed.
    addressed = mentioned or message.channel_type == "im"
    if message.type == "app_mention":
        return "mention", True
    if message.thread_ts is not None and message.thread_ts != message.ts:
        return "thread_reply", addressed
    if mentioned:
        return "mention", True
    if addressed or actor.is_self:
        # Our own top-level posts stay Signals so the router records them as self_generated.
        return "message", addressed
    return Ignored("not_addressed", "top-level message without a mention")


def _message_actor(message: _Message, identity: SlackIdentity) -> Actor | None:
    author = message.user or message.bot_id
    if author is None:
        return None
    profile_app = message.bot_profile.app_id if message.bot_profile else None
    is_self = (
        (message.bot_id is not None and message.bot_id == identity.bot_id)
        or identity.app_id in (profile_app, message.app_id)
        or message.user == identity.bot_user_id
    )
    is_bot = is_self or message.bot_id is not None or message.subtype == "bot_message"
    return Actor(id=author, name=_display_name(message, author), is_bot=is_bot, is_self=is_self)


def _display_name(message: _Message, fallback: str) -> str:
    profile = message.user_profile
    names = (
        profile.display_name if profile else None,
        profile.real_name if profile else None,
        profile.name if profile else None,
        message.bot_profile.name if message.bot_profile else None,
        message.username,
    )
    return next((name for name in names if name), fallback)


def _from_reaction(event: dict[str, Any], ctx: _Context) -> Signal | Ignored:
    reaction = _parse(_Reaction, event)
    if isinstance(reaction, Ignored):
        return reaction
    item = reaction.item
    if item.type != "message" or item.channel is None or item.ts is None:
        return Ignored("unsupported", f"reaction on a {item.type!r} item")
    command: Command | None = "stop" if reaction.reaction in STOP_REACTIONS else None
    is_self = reaction.user == ctx.identity.bot_user_id
    # The event names the message reacted to, which may be a reply: intake finds the thread
    # it belongs to from Keel's own records (routing.intake), never with a Web API call.
    thread = SlackThread(ctx.team, item.channel, item.ts)
    return Signal(
        provider="slack",
        delivery_id=ctx.event_id,
        kind="reaction",
        thread_ref=thread,
        objective_key=str(thread),
        actor=Actor(id=reaction.user, name=reaction.user, is_bot=is_self, is_self=is_self),
        text=f":{reaction.reaction}:",
        addresses_bot=command is not None,
        command=command,
        links=(),
        received_at=ctx.received_at,
        # Not the message's own key: a reaction is a separate fact about that message.
        dedupe_key=(
            f"{slack_message_fact(ctx.team, item.channel, item.ts)}:reaction:"
            f"{reaction.reaction}:{reaction.user}:{reaction.event_ts}"
        ),
        event_action="reaction_added",
        reaction=reaction.reaction,
        message=thread.message(item.ts),
    )


def _mention_pattern(bot_user_id: str) -> re.Pattern[str]:
    # Slack writes a mention as <@U123> or, in older clients, <@U123|name>.
    return re.compile(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>")


def _strip_leading_mention(text: str, mention: re.Pattern[str]) -> str:
    stripped = text.strip()
    found = mention.match(stripped)
    return stripped[found.end() :].strip() if found else stripped


def _parse(model: type[_M], payload: Mapping[str, Any]) -> _M | Ignored:
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or model.__name__
        return Ignored("unsupported", f"{where}: {first['msg']}")
