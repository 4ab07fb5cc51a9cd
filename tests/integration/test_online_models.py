"""``keel config check --online`` asks each configured model for one tool call, over real HTTP
to loopback stand-ins, and reads the context length Ollama serves from ``/api/show``."""

from __future__ import annotations

import json
from typing import Any

from adapters.config import build_config
from adapters.online import online_checks
from tests.integration import test_openai_provider as wire
from tests.integration.test_anthropic_provider import error, root
from tests.integration.test_openai_provider import API_KEY, CompletionsServer, Reply, completion

running_server = wire.running_server
llm = wire.llm

PING = {"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": "{}"}}


def show(parameters: str) -> Reply:
    """Ollama's ``/api/show`` answer, cut to the fields read."""
    body: dict[str, Any] = {
        "modelfile": "FROM qwen3:8b",
        "parameters": parameters,
        "details": {"family": "qwen3", "parameter_size": "8.2B"},
        "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960},
    }
    return Reply(body=json.dumps(body).encode())


def test_tool_call_passes_and_a_small_num_ctx_warns_when_ollama_serves_the_model(
    llm: CompletionsServer,
) -> None:
    llm.queue(completion({"content": None, "tool_calls": [PING]}), show("num_ctx 4096\nstop x"))
    tree = {"model": {"base_url": llm.base_url, "model": "qwen3:8b", "context_window": 32000}}

    checks = online_checks(build_config(tree, {}), timeout_s=5)

    assert [c.ok for c in checks] == [True, True]
    assert checks[0].line == "model: openai qwen3:8b answers and makes tool calls"
    assert checks[1].line.startswith("warning: model: openai qwen3:8b: Ollama serves it with")
    assert "num_ctx 4096 (the model's own: 40960), below model.context_window 32000" in (
        checks[1].line
    )
    sent, asked = (r.json() for r in llm.received)
    assert [t["function"]["name"] for t in sent["tools"]] == ["ping"]
    assert llm.received[1].path == "/api/show" and asked == {"model": "qwen3:8b"}


def test_a_model_that_answers_in_prose_and_a_refused_key_fail_the_check(
    llm: CompletionsServer,
) -> None:
    llm.queue(
        completion({"content": "pong"}),
        error(401, "authentication_error", f"invalid x-api-key {API_KEY}"),
    )
    tree = {
        "model": {"base_url": llm.base_url, "model": "tiny"},
        "agents": {
            "default": {},
            "claude": {
                "model": {
                    "provider": "anthropic",
                    "base_url": root(llm),
                    "model": "claude-keel-test",
                    "api_key": API_KEY,
                }
            },
        },
    }

    prose, refused = online_checks(build_config(tree, {}), timeout_s=5)

    assert not prose.ok and "answered without calling the offered tool" in prose.line
    assert not refused.ok and refused.line.startswith("agents.claude.model: anthropic")
    assert "rejected the API key (HTTP 401" in refused.line and API_KEY not in refused.line
    assert [r.path for r in llm.received] == ["/v1/chat/completions", "/v1/messages"]
