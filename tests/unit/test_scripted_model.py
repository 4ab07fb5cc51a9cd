"""The scripted model provider: script and turn selection, expectations, validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.errors import ConfigError, Permanent, Retryable
from runtime.models.base import (
    AssistantText,
    ConversationItem,
    ModelRequest,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    UserText,
)
from runtime.models.factory import build_provider
from runtime.models.scripted import ScriptedProvider, ScriptMismatch

SCRIPT = """
scripts:
  - match: "fix the (failing|broken) test"
    turns:
      - reasoning: "Reproduce first."
        say: "I will run the tests."
        tool_calls:
          - {name: run_command, args: {command: "pytest -q", env: {CI: "1"}}}
          - {name: read_file, args: {path: "parser.py"}}
      - expect_seen: ["1 failed"]
        say: "Patched."
        tool_calls:
          - {name: run_command, args: {command: "pytest -q"}}
      - wait_seen: ["<mailbox_update>"]
        say: "All done."
  - match: "open a PR"
    turns:
      - say: "PR opened."
  - turns:
      - say: "I can only fix tests."
"""


def make_request(
    *items: ConversationItem, turn: int = 0, first: str = "please fix the failing test"
) -> ModelRequest:
    return ModelRequest(
        task_id="task-1", turn=turn, system="You are Keel.", items=(UserText(first), *items)
    )


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider.from_yaml(SCRIPT)


async def test_first_turn_plays_reasoning_text_and_calls_when_turn_is_zero(
    provider: ScriptedProvider,
) -> None:
    response = await provider.complete(make_request())

    assert response.items == (
        Reasoning("Reproduce first."),
        AssistantText("I will run the tests."),
        ToolCallItem("call_0_0", "run_command", {"command": "pytest -q", "env": {"CI": "1"}}),
        ToolCallItem("call_0_1", "read_file", {"path": "parser.py"}),
    )


async def test_reply_follows_request_turn_when_turn_is_one(provider: ScriptedProvider) -> None:
    request = make_request(ToolResultItem("call_0_0", "1 failed, 3 passed"), turn=1)

    response = await provider.complete(request)

    assert response.items == (
        AssistantText("Patched."),
        ToolCallItem("call_1_0", "run_command", {"command": "pytest -q"}),
    )


async def test_call_ids_are_turn_and_index_when_any_turn_is_played(
    provider: ScriptedProvider,
) -> None:
    request = make_request(ToolResultItem("call_0_0", "1 failed"), turn=1)

    ids = [call.call_id for call in (await provider.complete(request)).tool_calls]

    assert ids == ["call_1_0"]


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        ("please fix the broken test in parser", "I will run the tests."),
        ("could you open a PR for this", "PR opened."),
        ("what's the weather", "I can only fix tests."),
    ],
)
async def test_script_is_chosen_by_first_user_message_when_patterns_differ(
    provider: ScriptedProvider, first: str, expected: str
) -> None:
    later = UserText("open a PR")  # only the first user message chooses the script

    response = await provider.complete(make_request(later, first=first))

    assert [i.text for i in response.items if isinstance(i, AssistantText)] == [expected]


async def test_default_is_used_only_when_no_pattern_matches_when_default_is_listed_first() -> None:
    provider = ScriptedProvider.from_dict(
        {
            "scripts": [
                {"turns": [{"say": "default"}]},
                {"match": "deploy", "turns": [{"say": "deploying"}]},
            ]
        }
    )

    deploy = await provider.complete(make_request(first="deploy it"))
    other = await provider.complete(make_request(first="hello"))

    assert deploy.items == (AssistantText("deploying"),)
    assert other.items == (AssistantText("default"),)


async def test_mismatch_is_raised_when_no_script_matches_and_there_is_no_default() -> None:
    provider = ScriptedProvider.from_dict(
        {"scripts": [{"match": "deploy", "turns": [{"say": "x"}]}]}
    )

    with pytest.raises(ScriptMismatch, match=r"no model script matches.*'deploy'"):
        await provider.complete(make_request(first="hello"))


async def test_expect_seen_raises_permanent_mismatch_when_text_is_absent(
    provider: ScriptedProvider,
) -> None:
    request = make_request(ToolResultItem("call_0_0", "4 passed"), turn=1)

    with pytest.raises(ScriptMismatch) as caught:
        await provider.complete(request)

    assert isinstance(caught.value, Permanent)
    assert "turn 1 expected to see ['1 failed']" in str(caught.value)
    assert "fix the (failing|broken) test" in str(caught.value)


async def test_expect_seen_ignores_assistant_text_when_only_the_model_said_it(
    provider: ScriptedProvider,
) -> None:
    request = make_request(AssistantText("1 failed"), turn=1)

    with pytest.raises(ScriptMismatch):
        await provider.complete(request)


async def test_wait_seen_raises_retryable_when_text_has_not_arrived(
    provider: ScriptedProvider,
) -> None:
    with pytest.raises(Retryable, match="waits to see"):
        await provider.complete(make_request(turn=2))


async def test_wait_seen_plays_the_turn_when_text_has_arrived(provider: ScriptedProvider) -> None:
    request = make_request(
        UserText("<mailbox_update>also bump the version</mailbox_update>"), turn=2
    )

    response = await provider.complete(request)

    assert response.items == (AssistantText("All done."),)
    assert response.tool_calls == ()


async def test_mismatch_names_turn_count_when_turn_is_beyond_script(
    provider: ScriptedProvider,
) -> None:
    with pytest.raises(
        ScriptMismatch, match=r"has 3 turn\(s\) but the model was called for turn 3"
    ):
        await provider.complete(make_request(turn=3))


async def test_same_request_gets_equal_reply_when_called_twice(provider: ScriptedProvider) -> None:
    request = make_request()

    first = await provider.complete(request)
    first.tool_calls[0].arguments["command"] = "rm -rf /"  # a caller mutating its copy
    second = await provider.complete(request)

    assert second == await provider.complete(request)
    assert second.tool_calls[0].arguments == {"command": "pytest -q", "env": {"CI": "1"}}


async def test_later_turn_does_not_depend_on_earlier_calls_when_replayed_out_of_order(
    provider: ScriptedProvider,
) -> None:
    turn_one = make_request(ToolResultItem("call_0_0", "1 failed"), turn=1)

    alone = await ScriptedProvider.from_yaml(SCRIPT).complete(turn_one)
    await provider.complete(make_request())
    after_turn_zero = await provider.complete(turn_one)

    assert alone == after_turn_zero


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ({"scripts": [{"turns": [{"sya": "hi"}]}]}, "scripts.0.turns.0.sya: unknown key 'sya'"),
        ({"scripts": [{"mach": "x", "turns": [{"say": "hi"}]}]}, "unknown key 'mach'"),
        ({"script": []}, "unknown key 'script'"),
        (
            {"scripts": [{"turns": [{"say": "x", "tool_calls": [{"name": "a", "arg": {}}]}]}]},
            "scripts.0.turns.0.tool_calls.0.arg: unknown key 'arg'",
        ),
        ({"scripts": [{"match": "(", "turns": [{"say": "x"}]}]}, "not a valid regular expression"),
        ({"scripts": [{"turns": [{"expect_seen": ["x"]}]}]}, "needs 'say', 'tool_calls'"),
        ({"scripts": [{"turns": []}]}, "scripts.0.turns"),
    ],
)
def test_invalid_script_is_rejected_with_its_location_when_loaded(
    script: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ScriptedProvider.from_dict(script)

    assert message in str(caught.value)


def test_yaml_that_is_not_a_mapping_is_rejected_when_loaded() -> None:
    with pytest.raises(ConfigError, match="expected a mapping"):
        ScriptedProvider.from_yaml("- just\n- a list\n")


async def test_script_file_is_played_when_loaded_from_path(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(SCRIPT, encoding="utf-8")

    response = await ScriptedProvider.from_path(path).complete(make_request(first="open a PR"))

    assert response.items == (AssistantText("PR opened."),)


def test_missing_script_file_names_the_path_when_loaded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        ScriptedProvider.from_path(tmp_path / "nope.yaml")


async def test_factory_builds_scripted_provider_when_given_yaml() -> None:
    provider = build_provider("scripted", yaml=SCRIPT)

    response = await provider.complete(make_request(first="open a PR"))

    assert response.items == (AssistantText("PR opened."),)


def test_factory_rejects_unknown_setting_when_building_scripted() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'file'"):
        build_provider("scripted", file="x.yaml")
