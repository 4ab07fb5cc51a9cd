"""The Slack emulator checks Block Kit as Slack does, over real HTTP with slack_sdk: Keel's
own rendering of a choice passes at Slack's limits, and blocks past them are refused with
``invalid_blocks`` and the place named."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.slack.surface import rendered
from runtime.surfaces import Action

CHANNEL = "C0KEELGEN1"
TOKEN = "xoxb-keel-emulated"


@pytest.fixture
def client() -> Iterator[WebClient]:
    with serve(create_slack_app(SlackState())) as server:
        yield WebClient(token=TOKEN, base_url=server.url + "/api/")


def _choice(count: int) -> tuple[Action, ...]:
    return tuple(Action("repo:s_01", f"acme/r{n}", f"acme/r{n}") for n in range(count))


@pytest.mark.parametrize(("count", "kind"), [(100, "static_select"), (101, "external_select")])
def test_a_choice_posts_as_slack_accepts_when_at_and_past_the_option_limit(
    client: WebClient, count: int, kind: str
) -> None:
    posted = client.chat_postMessage(channel=CHANNEL, **rendered("Which one?", _choice(count)))
    [select] = posted["message"]["blocks"][1]["elements"]
    assert select["type"] == kind


def _select(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    element = {"type": "static_select", "action_id": "keel:repo", "options": options}
    return [{"type": "actions", "elements": [element]}]


def _option(value: str, label: str = "a") -> dict[str, Any]:
    return {"text": {"type": "plain_text", "text": label}, "value": value}


@pytest.mark.parametrize(
    ("blocks", "pointer"),
    [
        (_select([_option(f"v{n}") for n in range(101)]), "/blocks/0/elements/0/options"),
        (_select([_option("v" * 151)]), "/blocks/0/elements/0/options/0/value"),
        (_select([_option("v", "x" * 76)]), "/blocks/0/elements/0/options/0/text/text"),
        (_select([]), "/blocks/0/elements/0/options"),
        ([{"type": "actions", "elements": []}], "/blocks/0/elements"),
        ([{"type": "carousel"}], "/blocks/0/type"),
    ],
    ids=["101 options", "long value", "long label", "no options", "no elements", "unknown"],
)
def test_blocks_are_refused_as_slack_refuses_them_when_past_a_limit(
    client: WebClient, blocks: list[dict[str, Any]], pointer: str
) -> None:
    with pytest.raises(SlackApiError) as refused:
        client.chat_postMessage(channel=CHANNEL, text="t", blocks=blocks)
    data = refused.value.response.data
    assert isinstance(data, dict) and data["error"] == "invalid_blocks"
    assert any(f"[json-pointer:{pointer}]" in error for error in data["errors"])
