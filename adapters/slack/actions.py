"""Button clicks on Keel's messages (Block Kit ``block_actions``), over HTTP or Socket Mode.

A click on a ``keel:<name>`` button becomes a Signal of kind ``action`` (``signal_from_click``,
pure) and goes to the same sink as events: the Stop button stops the thread's task exactly
as a 🛑 would, with the same authorisation; the Continue button under a budget's question
is the reply ``continue``; Approve and Reject under an approval question are
the replies ``approve call=<id>`` / ``reject call=<id>``, naming the call they answer. The
click is acknowledged after the Signal is committed; a second click of the same button finds
the stop already recorded, so the task stops once. A click Keel refuses (not allowed, or
nothing left to stop) is answered with a message only the clicker sees (chat.postEphemeral),
after the acknowledgement.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from adapters.slack.signals import foreign_workspace
from adapters.slack.surface import ACTION_PREFIX, OPTION_VALUE_LIMIT, call_slack, option_json
from adapters.slack.workspaces import SlackClients
from routing.repos import CHOICE, answer_text
from routing.result import IngestResult
from routing.signal import Actor, Ignored, Signal, slack_message_fact
from routing.sink import ChoiceSource, SignalSink
from runtime.answers import ANSWER_BUTTONS, CALL_MARK
from runtime.clock import Clock
from runtime.errors import KeelError, Retryable
from runtime.threads import BadThreadRef, SlackThread

log = logging.getLogger(__name__)
_REFUSALS = {
    ("stop", "unauthorised"): "Sorry, you are not allowed to stop this task.",
    ("stop", "not_addressed"): "There is nothing to stop here: this task has already finished.",
    ("approve", "unauthorised"): (
        "Sorry, you are not allowed to approve this; someone who may start tasks here can."
    ),
    ("reject", "unauthorised"): (
        "Sorry, you are not allowed to reject this; someone who may start tasks here can."
    ),
    ("approve", "not_addressed"): "There is nothing to approve: this task has already finished.",
    ("reject", "not_addressed"): "There is nothing to reject: this task has already finished.",
    ("continue", "unauthorised"): (
        "Sorry, you are not allowed to let this task spend more; someone who may start tasks "
        "here can."
    ),
    ("continue", "not_addressed"): (
        "There is nothing to continue here: this task has already finished."
    ),
    (CHOICE, "unauthorised"): (
        "Sorry, only the person who asked, or someone who may start tasks here, can choose "
        "the repository."
    ),
    (CHOICE, "not_offered"): (
        "That repository is not one of the choices offered here, so nothing was started."
    ),
    (CHOICE, "expired"): (
        "This question has expired: mention me again with `repo=owner/name` to start."
    ),
    (CHOICE, "answered"): "A repository was already chosen for this request.",
    (CHOICE, "not_addressed"): "There is no open question here to answer.",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Id(_Model):
    id: str


class _User(_Model):
    id: str
    username: str | None = None
    name: str | None = None


class _Container(_Model):
    message_ts: str
    channel_id: str
    thread_ts: str | None = None


class _Message(_Model):
    ts: str
    thread_ts: str | None = None


class _Option(_Model):
    value: str


class _Action(_Model):
    action_id: str
    value: str = ""
    action_ts: str
    # A select's pick (``static_select``/``external_select``); a button has ``value``.
    selected_option: _Option | None = None


class _Click(_Model):
    team: _Id
    user: _User
    container: _Container
    message: _Message | None = None
    actions: list[_Action]


def signal_from_click(payload: dict[str, Any], *, received_at: datetime) -> Signal | Ignored:
    """One ``block_actions`` payload (its first action) as a Signal, or why not."""
    try:
        click = _Click.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        return Ignored("unsupported", ".".join(map(str, first["loc"])) + f": {first['msg']}")
    if not click.actions or not click.actions[0].action_id.startswith(ACTION_PREFIX):
        return Ignored("unsupported", "not a Keel button")
    action, where = click.actions[0], click.container
    name = action.action_id.removeprefix(ACTION_PREFIX)
    root = where.thread_ts or (click.message.thread_ts if click.message else None)
    try:
        thread = SlackThread(click.team.id, where.channel_id, root or where.message_ts)
    except BadThreadRef as e:
        return Ignored("unsupported", str(e))
    person = click.user
    return Signal(
        provider="slack",
        delivery_id=click_id(click.team.id, where.channel_id, action.action_ts, person.id),
        kind="action",
        thread_ref=thread,
        objective_key=str(thread),
        actor=Actor(
            id=person.id,
            name=person.username or person.name or person.id,
            is_bot=False,
            is_self=False,
        ),
        text=_click_text(name, action),
        addresses_bot=True,
        command="stop" if name == "stop" else None,
        links=(),
        received_at=received_at,
        dedupe_key=(
            f"{slack_message_fact(click.team.id, where.channel_id, where.message_ts)}"
            f":action:{name}:{person.id}:{action.action_ts}"
        ),
        event_action="block_actions",
        # The clicked message: intake finds its task, and the 🛑 lands on it.
        message=thread.message(where.message_ts),
    )


def _click_text(name: str, action: _Action) -> str:
    """What the click says: an answer names the call it answers (so a late click never
    approves another call), a pick under a repository question names the question."""
    if name in ANSWER_BUTTONS:
        return f"{name} {CALL_MARK}{action.value}"
    picked = action.selected_option.value if action.selected_option else None
    fits = picked is not None and len(picked) <= OPTION_VALUE_LIMIT
    answer = answer_text(name, picked) if picked is not None and fits else None
    return answer or name


def click_id(team: str, channel: str, action_ts: str, user: str) -> str:
    """A click's identity: Slack sends the same ``action_ts`` if it delivers it again."""
    return f"action:{team}:{channel}:{action_ts}:{user}"


def register_actions(app: AsyncApp, clients: SlackClients, sink: SignalSink, clock: Clock) -> None:
    @app.action(re.compile(f"^{re.escape(ACTION_PREFIX)}"))
    async def on_click(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        click = signal_from_click(body, received_at=clock.now())
        delivery = click.delivery_id if isinstance(click, Signal) else "action:unreadable"
        found = context.authorize_result
        team = body.get("team")
        claimed = team.get("id") if isinstance(team, dict) else None
        outcome = foreign_workspace(found.team_id if found else None, claimed) or click
        try:
            result = await sink.accept(
                outcome, provider="slack", delivery_id=delivery, raw_kind="block_actions"
            )
        except Retryable:
            return  # not acknowledged: Slack tells the person it failed, and a retry works
        await ack()
        if isinstance(outcome, Signal):
            await _answer_refusal(clients, outcome, result)

    @app.options(re.compile(f"^{re.escape(ACTION_PREFIX)}"))
    async def on_options(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        found = context.authorize_result
        await ack(options=await on_suggestion(sink, body, found.team_id if found else None))


class _Suggestion(_Model):
    team: _Id
    action_id: str
    value: str = ""


async def on_suggestion(
    sink: SignalSink, body: dict[str, Any], own_team: str | None
) -> list[dict[str, Any]]:
    """The options of a select too long to list (``block_suggestion``), searched by what
    the person typed; nothing for another workspace, or for a select that is not ours."""
    try:
        asked = _Suggestion.model_validate(body)
    except ValidationError:
        return []
    if foreign_workspace(own_team, asked.team.id) is not None:
        return []
    if not isinstance(sink, ChoiceSource):
        return []
    name = asked.action_id.removeprefix(ACTION_PREFIX)
    return [option_json(label, value) for label, value in sink.choices(name, asked.value[:100])]


async def _answer_refusal(clients: SlackClients, click: Signal, result: IngestResult) -> None:
    refusal = (click.text.split(" ", 1)[0], result.reason or "")
    text = _REFUSALS.get(refusal) if result.decision == "drop" else None
    where = click.thread_ref
    if text is None or not isinstance(where, SlackThread):  # the thread, by its root
        return
    try:
        client = await clients.client(where.team)
        await call_slack(
            client.chat_postEphemeral(
                channel=where.channel, user=click.actor.id, text=text, thread_ts=where.thread_ts
            )
        )
    except KeelError as e:  # the click is recorded; only the courtesy note is lost
        log.warning("could not tell %s why their click was refused: %s", click.actor.id, e)
