"""The interactivity payloads Slack sends when a person uses Keel's blocks in the emulated
workspace, shaped as Slack's interactivity reference describes them: ``block_actions`` for a
pick in a select (https://api.slack.com/reference/interaction-payloads/block-actions) and
``block_suggestion`` for a search in an external select
(https://api.slack.com/reference/block-kit/block-elements#external_select). The
``block_suggestion`` fields are those of slackapi/bolt-python's own test payload
(tests/scenario_tests_async/test_block_suggestion.py, commit c7bee97), with a message
container instead of a modal's. Tests sign and post them to Keel's ``/slack/interactivity``
as Slack would.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from adapters.emulators.slack import SlackMessage, SlackState


def select_of(message: SlackMessage, prefix: str) -> tuple[str, dict[str, Any]]:
    """The (block_id, element) of the message's select whose action_id starts ``prefix``."""
    for n, block in enumerate(message.blocks or []):
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            selects = ("static_select", "external_select")
            if element["type"] in selects and element["action_id"].startswith(prefix):
                return str(block.get("block_id") or f"b{n}"), element
    raise LookupError(f"no select {prefix}* on message {message.ts}")


def block_actions(
    state: SlackState,
    message: SlackMessage,
    *,
    user: str,
    action_id_prefix: str,
    value: str,
    label: str | None = None,
) -> dict[str, Any]:
    """A ``block_actions`` payload for picking ``value`` in the message's select, as Slack
    sends it: the pick in ``actions[0].selected_option`` and in ``state.values``. The value
    need not be one of the offered options: a forged payload is what tests need too."""
    block_id, element = select_of(message, action_id_prefix)
    option = {"text": {"type": "plain_text", "text": label or value, "emoji": True}, "value": value}
    picked = {"type": element["type"], "selected_option": option}
    return {
        **_interaction(state, message, user, "block_actions"),
        "state": {"values": {block_id: {element["action_id"]: picked}}},
        "actions": [
            {
                **picked,
                "action_id": element["action_id"],
                "block_id": block_id,
                "placeholder": element.get("placeholder"),
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def block_suggestion(
    state: SlackState, message: SlackMessage, *, user: str, action_id_prefix: str, typed: str
) -> dict[str, Any]:
    """A ``block_suggestion`` payload: a person typed ``typed`` into an external select."""
    block_id, element = select_of(message, action_id_prefix)
    payload = _interaction(state, message, user, "block_suggestion")
    payload.pop("trigger_id")
    payload.pop("response_url")
    return payload | {"action_id": element["action_id"], "block_id": block_id, "value": typed}


def _interaction(state: SlackState, message: SlackMessage, user: str, kind: str) -> dict[str, Any]:
    root = message.thread_ts or message.ts
    return {
        "type": kind,
        "team": {"id": state.team_id, "domain": "keel-emulated"},
        "user": {
            "id": user,
            "username": user.lower(),
            "name": user.lower(),
            "team_id": state.team_id,
        },
        "api_app_id": state.app_id,
        "token": "unused",
        "container": {
            "type": "message",
            "message_ts": message.ts,
            "channel_id": message.channel,
            "is_ephemeral": False,
            "thread_ts": root,
        },
        "trigger_id": uuid.uuid4().hex,
        "channel": {"id": message.channel, "name": state.channels.get(message.channel, "")},
        "message": {
            "type": "message",
            "ts": message.ts,
            "thread_ts": root,
            "text": message.text,
            "blocks": message.blocks or [],
        },
        "response_url": "https://hooks.slack.invalid/actions/unused",
    }
