"""The Anthropic provider against a loopback server answering Messages API shapes.

The server is test_openai_provider's Starlette stand-in, which also routes ``/v1/messages``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from runtime.errors import ConfigError, ContextLengthExceeded, Permanent, ProviderUnavailable
from runtime.models.anthropic import AnthropicProvider
from runtime.models.base import (
    AssistantText,
    ImagePart,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    Usage,
    UserText,
)
from runtime.models.factory import build_provider
from tests.integration.test_openai_provider import (
    API_KEY,
    RUN_COMMAND,
    CompletionsServer,
    RecordedSleep,
    Reply,
    assert_secret_absent,
    llm,
    make_request,
    running_server,
)

__all__ = ["llm", "running_server"]  # the stand-in's fixtures, used here by name


def root(server: CompletionsServer) -> str:
    return server.base_url.removesuffix("/v1")


def sent_key(headers: dict[str, str]) -> str:
    """The key as the SDK sent it: ``x-api-key``, or a Bearer token (newer SDKs)."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def make_provider(server: CompletionsServer, sleep: RecordedSleep, **overrides: Any) -> Any:
    settings: dict[str, Any] = {"timeout_s": 5.0, "max_retries": 2, "sleep": sleep}
    settings.update(overrides)
    return AnthropicProvider("claude-keel-test", API_KEY, root(server), **settings)


def message(*content: dict[str, Any], **usage: int) -> Reply:
    body = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-keel-test",
        "content": list(content),
        "stop_reason": "tool_use" if any(c["type"] == "tool_use" for c in content) else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 2095, "output_tokens": 503, **usage},
    }
    return Reply(body=json.dumps(body).encode(), headers={"request-id": "req_011"})


def error(status: int, kind: str, text: str, **headers: str) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_012"}
    return Reply(status=status, body=json.dumps(body).encode(), headers=headers)


async def test_tool_use_round_trip_maps_blocks_both_ways_when_model_calls_a_tool(
    llm: CompletionsServer,
) -> None:
    llm.queue(
        message(
            {"type": "thinking", "thinking": "Rerun the failing test.", "signature": "c2ln"},
            {"type": "text", "text": "Running it."},
            {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "run_command",
                "input": {"command": "pytest -q"},
            },
            cache_read_input_tokens=1000,
            cache_creation_input_tokens=5,
        )
    )
    request = make_request(
        UserText("fix it", images=(ImagePart("image/png", "aGk="),)),
        Reasoning("think"),
        AssistantText("Looking."),
        ToolCallItem("toolu_00", "run_command", {"command": "ls"}),
        ToolResultItem("toolu_00", "No such file", is_error=True),
        UserText("<mailbox_update>also bump</mailbox_update>"),
        tools=(RUN_COMMAND,),
    )

    response = await make_provider(llm, RecordedSleep()).complete(replace(request, max_tokens=64))

    assert response.items == (
        Reasoning("Rerun the failing test."),
        AssistantText("Running it."),
        ToolCallItem("toolu_01A", "run_command", {"command": "pytest -q"}),
    )
    assert response.usage == Usage(2095 + 1000 + 5, 503, 1000)
    [sent] = llm.received
    assert sent.path == "/v1/messages"
    assert sent_key(sent.headers) == API_KEY and "anthropic-version" in sent.headers
    assert sent.json() == {
        "model": "claude-keel-test",
        "max_tokens": 64,
        "system": "You are Keel.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "aGk="},
                    },
                    {"type": "text", "text": "fix it"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_00",
                        "name": "run_command",
                        "input": {"command": "ls"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_00",
                        "content": "No such file",
                        "is_error": True,
                    },
                    {"type": "text", "text": "<mailbox_update>also bump</mailbox_update>"},
                ],
            },
        ],
        "tools": [
            {
                "name": "run_command",
                "description": RUN_COMMAND.description,
                "input_schema": RUN_COMMAND.parameters,
            }
        ],
    }


async def test_rate_limit_waits_retry_after_then_succeeds_when_server_returns_429(
    llm: CompletionsServer,
) -> None:
    sleep = RecordedSleep()
    llm.queue(
        error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
            **{"retry-after": "9"},
        ),
        message({"type": "text", "text": "hi"}),
    )

    response = await make_provider(llm, sleep).complete(make_request())

    assert response.items == (AssistantText("hi"),) and sleep.delays == [9.0]
    assert llm.received[0].json()["max_tokens"] == 4096  # the default bound


async def test_overloaded_is_a_provider_outage_when_it_persists(llm: CompletionsServer) -> None:
    llm.queue(*(error(529, "overloaded_error", "Overloaded") for _ in range(2)))

    with pytest.raises(ProviderUnavailable, match=r"after 2 attempt\(s\): HTTP 529: Overloaded"):
        await make_provider(llm, RecordedSleep(), max_retries=1).complete(make_request())


async def test_prompt_too_long_is_context_length_when_server_refuses_with_400(
    llm: CompletionsServer,
) -> None:
    llm.queue(error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000"))

    with pytest.raises(ContextLengthExceeded, match="prompt is too long"):
        await make_provider(llm, RecordedSleep()).complete(make_request())
    assert len(llm.received) == 1


async def test_bad_key_is_permanent_without_the_key_when_server_returns_401(
    llm: CompletionsServer,
) -> None:
    llm.queue(error(401, "authentication_error", f"invalid x-api-key {API_KEY}"))

    with pytest.raises(Permanent, match=r"rejected the API key \(HTTP 401") as caught:
        await make_provider(llm, RecordedSleep()).complete(make_request())
    assert_secret_absent(caught.value)
    assert not isinstance(caught.value, ProviderUnavailable) and len(llm.received) == 1


async def test_factory_builds_anthropic_with_key_from_env_and_refuses_it_without(
    llm: CompletionsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_TEST_ANTHROPIC_KEY", API_KEY)
    llm.queue(message({"type": "text", "text": "ok"}))
    provider = build_provider(
        "anthropic",
        base_url=root(llm),
        model="claude-keel-test",
        api_key_env="KEEL_TEST_ANTHROPIC_KEY",
    )

    await provider.complete(make_request())

    assert sent_key(llm.received[0].headers) == API_KEY
    assert API_KEY not in repr(provider)
    with pytest.raises(ConfigError, match="needs an api_key"):
        build_provider("anthropic", model="claude-keel-test", api_key=None)
