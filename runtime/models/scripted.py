"""A deterministic model provider that plays a YAML script of turns (tests and ``keel demo``).

The executor may crash and call the same turn again, so the provider keeps no state: the reply
is a pure function of the request. The script is chosen by matching its ``match`` regex against
the first user message (scripts with a ``match`` are tried in order; the first script without
one is the default), and the turn by ``request.turn``. Call ids are ``call_<turn>_<index>``.

```yaml
scripts:
  - match: "fix the failing test"
    turns:
      - expect_seen: ["<mailbox_update>"]   # else ScriptMismatch
        expect_images: ["screenshot.png"]   # image parts by name, else ScriptMismatch
        wait_seen: ["CI passed"]            # else Retryable: call again later
        reasoning: "The test is red."
        say: "I will run the tests."
        tool_calls:
          - {name: run_command, args: {command: "pytest -q"}}
          - {name: run_command, raw_args: '{"command": "ls'}   # as a server sent it
      - say: "All done."                    # no tool calls: the final answer
```
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runtime.errors import ConfigError, Permanent, Retryable
from runtime.models.base import (
    AssistantText,
    ConversationItem,
    ModelRequest,
    ModelResponse,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    Usage,
    UserText,
    read_arguments,
)
from runtime.models.size import item_chars, request_chars, tokens_of


class ScriptMismatch(Permanent):
    """The conversation is not the one the script was written for."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    name: str
    args: Mapping[str, Any]
    # The arguments as text on the wire, read like a real provider reads them (malformed
    # arguments included); when given, ``args`` is ignored.
    raw_args: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    say: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    expect_seen: tuple[str, ...] = ()
    wait_seen: tuple[str, ...] = ()
    expect_images: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Script:
    match: re.Pattern[str] | None
    turns: tuple[ScriptedTurn, ...]

    @property
    def label(self) -> str:
        return f"script {self.match.pattern!r}" if self.match else "the default script"


@dataclass(frozen=True, slots=True)
class ScriptedProvider:
    """Plays ``scripts``; build it with ``from_yaml``, ``from_path`` or ``from_dict``."""

    scripts: tuple[Script, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptedProvider:
        try:
            parsed = _ScriptFile.model_validate(data)
        except ValidationError as e:
            raise ConfigError(f"invalid model script: {_describe(e)}") from e
        return cls(tuple(_script(script) for script in parsed.scripts))

    @classmethod
    def from_yaml(cls, text: str) -> ScriptedProvider:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"invalid model script: not valid YAML ({e})") from e
        if not isinstance(data, Mapping):
            raise ConfigError("invalid model script: expected a mapping with a 'scripts' key")
        return cls.from_dict(data)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> ScriptedProvider:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read model script {os.fspath(path)!r}: {e}") from e
        return cls.from_yaml(text)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return self.reply(request)

    def reply(self, request: ModelRequest) -> ModelResponse:
        """The scripted reply to ``request``; the same request always gets the same reply.

        Usage is reported as if a token were four characters, so token accounting and the
        context window's calibration see numbers a real provider would send."""
        if request.purpose == "compaction":
            return _with_usage(request, _summary(request))
        script = self._select(_first_user_text(request.items))
        turn = _turn(script, request.turn)
        _check_seen(script, request, turn)
        return _with_usage(request, _response(turn, request.turn))

    def _select(self, first_user_text: str) -> Script:
        for script in self.scripts:
            if script.match is not None and script.match.search(first_user_text):
                return script
        for script in self.scripts:
            if script.match is None:
                return script
        patterns = ", ".join(repr(s.match.pattern) for s in self.scripts if s.match)
        raise ScriptMismatch(
            f"no model script matches the first user message {first_user_text[:200]!r} "
            f"(patterns: {patterns}) and there is no default script"
        )


def _turn(script: Script, turn: int) -> ScriptedTurn:
    if not 0 <= turn < len(script.turns):
        raise ScriptMismatch(
            f"{script.label} has {len(script.turns)} turn(s) but the model was called for "
            f"turn {turn}"
        )
    return script.turns[turn]


def _check_seen(script: Script, request: ModelRequest, turn: ScriptedTurn) -> None:
    seen = list(_visible_texts(request.items))
    missing_wait = [s for s in turn.wait_seen if not any(s in text for text in seen)]
    if missing_wait:
        raise Retryable(f"{script.label} turn {request.turn} waits to see {missing_wait!r}")
    missing = [s for s in turn.expect_seen if not any(s in text for text in seen)]
    if missing:
        raise ScriptMismatch(
            f"{script.label} turn {request.turn} expected to see {missing!r} in a user message "
            f"or tool result, but none of the {len(seen)} contains it"
        )
    shown = {
        image.name for item in request.items if isinstance(item, UserText) for image in item.images
    }
    unseen = [name for name in turn.expect_images if name not in shown]
    if unseen:
        raise ScriptMismatch(
            f"{script.label} turn {request.turn} expected image parts {unseen!r}; the request "
            f"has {sorted(shown) or 'none'}"
        )


def _visible_texts(items: Sequence[ConversationItem]) -> Iterator[str]:
    for item in items:
        match item:
            case UserText(text=text):
                yield text
            case ToolResultItem(output=output):
                yield output


SCRIPTED_CHARS_PER_TOKEN = 4


def _with_usage(request: ModelRequest, response: ModelResponse) -> ModelResponse:
    prompt = tokens_of(request_chars(request), SCRIPTED_CHARS_PER_TOKEN)
    completion = tokens_of(
        sum(item_chars(item) for item in response.items), SCRIPTED_CHARS_PER_TOKEN
    )
    return ModelResponse(response.items, Usage(prompt, completion))


_CALLED = re.compile(r"assistant called (\w+)")
_SAID = re.compile(r"^assistant: (.*)$", re.M)


def _summary(request: ModelRequest) -> ModelResponse:
    """A summary made of what the work shows: the tools it called and its last words."""
    seen = "\n".join(_visible_texts(request.items))
    calls = _CALLED.findall(seen)
    said = _SAID.findall(seen)
    text = (
        f"Summary of the work so far: {len(calls)} tool call(s) "
        f"({', '.join(dict.fromkeys(calls)) or 'none'}); "
        f"last said: {said[-1][:200] if said else '(nothing)'}"
    )
    return ModelResponse((AssistantText(text),))


def _first_user_text(items: Sequence[ConversationItem]) -> str:
    return next((item.text for item in items if isinstance(item, UserText)), "")


def _response(turn: ScriptedTurn, turn_number: int) -> ModelResponse:
    items: list[AssistantText | Reasoning | ToolCallItem] = []
    if turn.reasoning is not None:
        items.append(Reasoning(turn.reasoning))
    if turn.say is not None:
        items.append(AssistantText(turn.say))
    for index, call in enumerate(turn.tool_calls):
        call_id = f"call_{turn_number}_{index}"
        if call.raw_args is not None:
            arguments, problem = read_arguments(call.raw_args)
            items.append(ToolCallItem(call_id, call.name, arguments, problem))
            continue
        # A copy, so a caller mutating arguments cannot change what the next call returns.
        items.append(ToolCallItem(call_id, call.name, copy.deepcopy(dict(call.args))))
    return ModelResponse(items=tuple(items))


# --- the script file boundary --------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _CallSpec(_Strict):
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    raw_args: str | None = None


class _TurnSpec(_Strict):
    expect_seen: list[str] = Field(default_factory=list)
    wait_seen: list[str] = Field(default_factory=list)
    expect_images: list[str] = Field(default_factory=list)
    reasoning: str | None = None
    say: str | None = None
    tool_calls: list[_CallSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _says_or_calls(self) -> _TurnSpec:
        if self.say is None and not self.tool_calls:
            raise ValueError("a turn needs 'say', 'tool_calls' or both")
        return self


class _ScriptSpec(_Strict):
    match: str | None = None
    turns: list[_TurnSpec] = Field(min_length=1)

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as e:
                raise ValueError(f"'match' is not a valid regular expression: {e}") from e
        return value


class _ScriptFile(_Strict):
    scripts: list[_ScriptSpec] = Field(min_length=1)


def _script(spec: _ScriptSpec) -> Script:
    turns = tuple(
        ScriptedTurn(
            say=turn.say,
            reasoning=turn.reasoning,
            tool_calls=tuple(
                ScriptedCall(call.name, call.args, call.raw_args) for call in turn.tool_calls
            ),
            expect_seen=tuple(turn.expect_seen),
            wait_seen=tuple(turn.wait_seen),
            expect_images=tuple(turn.expect_images),
        )
        for turn in spec.turns
    )
    return Script(re.compile(spec.match) if spec.match is not None else None, turns)


def _describe(error: ValidationError) -> str:
    return "; ".join(_describe_one(detail) for detail in error.errors())


def _describe_one(detail: Any) -> str:
    location = ".".join(str(part) for part in detail["loc"]) or "<root>"
    if detail["type"] == "extra_forbidden":
        return f"{location}: unknown key {detail['loc'][-1]!r}"
    return f"{location}: {detail['msg']}"
