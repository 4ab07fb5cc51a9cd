"""The OpenAI provider against a local OpenAI-compatible server on real loopback sockets.

The server is a small Starlette app under uvicorn in a thread; each test queues the replies it
should give and then reads back the requests it received.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx2
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runtime.errors import (
    ConfigError,
    ContextLengthExceeded,
    Permanent,
    ProviderUnavailable,
    Retryable,
)
from runtime.models.base import (
    AssistantText,
    ConversationItem,
    ModelRequest,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    ToolSpec,
    Usage,
    UserText,
)
from runtime.models.factory import build_provider
from runtime.models.openai import OpenAIProvider

API_KEY = "sk-test-4f9d2c-very-secret"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class CompletionsServer:
    """What the loopback server will answer next, and what it has received."""

    base_url: str = ""
    replies: deque[Reply] = field(default_factory=deque)
    received: list[Received] = field(default_factory=list)
    # The answer when nothing is queued (an outage's 500, say); None: 418, "no reply queued".
    otherwise: Reply | None = None

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def reset(self) -> None:
        self.replies.clear()
        self.received.clear()
        self.otherwise = None


def completion(message: dict[str, Any]) -> Reply:
    """A chat.completion body shaped like OpenAI's, around one assistant ``message``."""
    body = {
        "id": "chatcmpl-9xYz",
        "object": "chat.completion",
        "created": 1733140000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, **message},
                "logprobs": None,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        "system_fingerprint": "fp_0ba0d124f1",
    }
    return Reply(body=json.dumps(body).encode())


def error(status: int, message: str, code: str | None = None, **headers: str) -> Reply:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }
    return Reply(status=status, body=json.dumps(body).encode(), headers=headers)


def build_app(server: CompletionsServer) -> Starlette:
    async def chat_completions(request: Request) -> Response:
        server.received.append(
            Received(request.url.path, dict(request.headers), await request.body())
        )
        if not server.replies and server.otherwise is None:
            return Response(b'{"error": {"message": "no reply queued"}}', status_code=418)
        reply = server.replies.popleft() if server.replies else server.otherwise
        assert reply is not None
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        return Response(
            reply.body, reply.status, headers=reply.headers, media_type="application/json"
        )

    # Anthropic's Messages API and Ollama's /api/show are answered the same way
    # (test_anthropic_provider, test_online_models).
    return Starlette(
        routes=[
            Route(path, chat_completions, methods=["POST"])
            for path in ("/v1/chat/completions", "/v1/messages", "/api/show")
        ]
    )


@pytest.fixture(scope="module")
def running_server() -> Iterator[CompletionsServer]:
    server = CompletionsServer()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        build_app(server), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    server.base_url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    yield server
    uv.should_exit = True
    thread.join(timeout=5)
    listener.close()


@pytest.fixture
def llm(running_server: CompletionsServer) -> Iterator[CompletionsServer]:
    running_server.reset()
    yield running_server
    assert not running_server.replies, "a queued reply was never requested"


@dataclass
class RecordedSleep:
    """The injected sleep: records each delay and yields to the loop without waiting."""

    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


def make_provider(base_url: str, sleep: RecordedSleep, **overrides: Any) -> OpenAIProvider:
    settings: dict[str, Any] = {"api_key": API_KEY, "timeout_s": 5.0, "max_retries": 3}
    settings.update(overrides)
    return OpenAIProvider(base_url, "gpt-4o-mini", sleep=sleep, **settings)


def make_request(*items: ConversationItem, tools: tuple[ToolSpec, ...] = ()) -> ModelRequest:
    return ModelRequest(
        task_id="task-7",
        turn=1,
        system="You are Keel.",
        items=items or (UserText("hello"),),
        tools=tools,
    )


def assert_secret_absent(error: BaseException) -> None:
    assert API_KEY not in str(error)
    assert API_KEY not in repr(error)
    assert "4f9d2c" not in str(error)


RUN_COMMAND = ToolSpec(
    name="run_command",
    description="Run a shell command in the workspace.",
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
)


async def test_tool_call_round_trip_sends_results_and_parses_calls_when_model_uses_tools(
    llm: CompletionsServer,
) -> None:
    llm.queue(
        completion(
            {
                "content": "Running the focused test next.",
                "reasoning_content": "The parser test failed; rerun it alone.",
                "tool_calls": [
                    {
                        "id": "call_Qm3",
                        "type": "function",
                        "function": {
                            "name": "run_command",
                            "arguments": '{"command": "pytest -q tests/test_parser.py"}',
                        },
                    },
                    {
                        "id": "call_Qm4",
                        "type": "function",
                        "function": {"name": "run_command", "arguments": ""},
                    },
                ],
            }
        )
    )
    request = make_request(
        UserText("fix the failing test"),
        Reasoning("think first"),
        AssistantText("Let me look."),
        ToolCallItem("call_a", "run_command", {"command": "pytest -q"}),
        ToolCallItem("call_b", "run_command", {"command": "cat parser.py"}),
        ToolResultItem("call_a", "1 failed, 3 passed"),
        ToolResultItem("call_b", "No such file", is_error=True),
        UserText("<mailbox_update>also bump the version</mailbox_update>"),
        tools=(RUN_COMMAND,),
    )

    response = await make_provider(llm.base_url, RecordedSleep()).complete(request)

    assert response.items == (
        Reasoning("The parser test failed; rerun it alone."),
        AssistantText("Running the focused test next."),
        ToolCallItem("call_Qm3", "run_command", {"command": "pytest -q tests/test_parser.py"}),
        ToolCallItem("call_Qm4", "run_command", {}),
    )
    [sent] = llm.received
    assert sent.path == "/v1/chat/completions"
    assert sent.json() == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are Keel."},
            {"role": "user", "content": "fix the failing test"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {
                            "name": "run_command",
                            "arguments": '{"command": "pytest -q"}',
                        },
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {
                            "name": "run_command",
                            "arguments": '{"command": "cat parser.py"}',
                        },
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "1 failed, 3 passed"},
            {"role": "tool", "tool_call_id": "call_b", "content": "[tool error] No such file"},
            {"role": "user", "content": "<mailbox_update>also bump the version</mailbox_update>"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "run_command",
                    "description": "Run a shell command in the workspace.",
                    "parameters": RUN_COMMAND.parameters,
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"


async def test_tool_only_turn_is_sent_with_null_content_when_assistant_said_nothing(
    llm: CompletionsServer,
) -> None:
    llm.queue(completion({"content": "Done."}))
    request = make_request(
        UserText("go"),
        ToolCallItem("call_a", "run_command", {"command": "ls"}),
        ToolResultItem("call_a", "README.md"),
    )

    response = await make_provider(llm.base_url, RecordedSleep()).complete(request)

    assert response.items == (AssistantText("Done."),)
    assistant = llm.received[0].json()["messages"][2]
    assert assistant["content"] is None
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a"]
    assert "tools" not in llm.received[0].json()


async def test_missing_call_ids_are_derived_from_turn_when_server_omits_them(
    llm: CompletionsServer,
) -> None:
    call = {"type": "function", "function": {"name": "run_command", "arguments": {"command": "ls"}}}
    llm.queue(completion({"content": None, "tool_calls": [call]}))

    response = await make_provider(llm.base_url, RecordedSleep()).complete(make_request())

    assert response.items == (ToolCallItem("call_1_0", "run_command", {"command": "ls"}),)


async def test_no_authorization_header_is_sent_when_api_key_is_unset(
    llm: CompletionsServer,
) -> None:
    llm.queue(completion({"content": "hi"}))

    await make_provider(llm.base_url, RecordedSleep(), api_key=None).complete(make_request())

    assert "authorization" not in llm.received[0].headers


async def test_retry_after_is_waited_then_request_succeeds_when_server_returns_429(
    llm: CompletionsServer,
) -> None:
    sleep = RecordedSleep()
    llm.queue(
        error(
            429, "Rate limit reached for gpt-4o-mini", "rate_limit_exceeded", **{"Retry-After": "7"}
        ),
        completion({"content": "hello again"}),
    )

    response = await make_provider(llm.base_url, sleep).complete(make_request())

    assert response.items == (AssistantText("hello again"),)
    assert sleep.delays == [7.0]
    assert len(llm.received) == 2


async def test_retryable_is_raised_at_once_when_retry_after_exceeds_the_wait_limit(
    llm: CompletionsServer,
) -> None:
    sleep = RecordedSleep()
    llm.queue(error(429, "Rate limit reached", **{"Retry-After": "600"}))

    with pytest.raises(Retryable) as caught:
        await make_provider(llm.base_url, sleep, max_retry_after_s=60).complete(make_request())

    assert caught.value.retry_after_s == 600.0
    assert sleep.delays == []
    assert len(llm.received) == 1


async def test_backoff_is_slept_then_request_succeeds_when_server_returns_500(
    llm: CompletionsServer,
) -> None:
    sleep = RecordedSleep()
    llm.queue(error(500, "The server had an error"), completion({"content": "recovered"}))

    response = await make_provider(llm.base_url, sleep, backoff_base_s=1.0).complete(make_request())

    assert response.items == (AssistantText("recovered"),)
    [delay] = sleep.delays
    assert 0.5 <= delay <= 1.0


async def test_retryable_is_raised_when_retries_are_exhausted(llm: CompletionsServer) -> None:
    sleep = RecordedSleep()
    llm.queue(*(error(503, "overloaded") for _ in range(3)))

    with pytest.raises(ProviderUnavailable) as caught:
        await make_provider(llm.base_url, sleep, max_retries=2, backoff_base_s=1.0).complete(
            make_request()
        )

    assert "failed after 3 attempt(s): HTTP 503: overloaded" in str(caught.value)
    assert len(llm.received) == 3
    first, second = sleep.delays
    assert 0.5 <= first <= 1.0
    assert 1.0 <= second <= 2.0


async def test_read_timeout_is_retried_then_retryable_when_server_is_too_slow(
    llm: CompletionsServer,
) -> None:
    sleep = RecordedSleep()
    llm.queue(Reply(delay_s=0.6), Reply(delay_s=0.6))

    with pytest.raises(ProviderUnavailable, match="ReadTimeout"):
        await make_provider(llm.base_url, sleep, timeout_s=0.2, max_retries=1).complete(
            make_request()
        )

    assert len(llm.received) == 2
    assert len(sleep.delays) == 1
    await asyncio.sleep(0.5)  # let the slow handlers finish before the next test resets


async def test_connect_failure_is_retried_then_retryable_when_nothing_listens() -> None:
    sleep = RecordedSleep()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    provider = make_provider(f"http://127.0.0.1:{closed_port}/v1", sleep, max_retries=2)
    with pytest.raises(ProviderUnavailable, match="ConnectError"):
        await provider.complete(make_request())

    assert len(sleep.delays) == 2


async def test_unauthorized_is_permanent_without_the_key_when_server_returns_401(
    llm: CompletionsServer,
) -> None:
    sleep = RecordedSleep()
    llm.queue(error(401, f"Incorrect API key provided: {API_KEY}.", "invalid_api_key"))

    with pytest.raises(Permanent) as caught:
        await make_provider(llm.base_url, sleep).complete(make_request())

    assert "model provider rejected the API key (HTTP 401" in str(caught.value)
    assert "Incorrect API key provided" in str(caught.value)
    assert_secret_absent(caught.value)
    assert not isinstance(caught.value, Retryable)
    assert sleep.delays == []
    assert len(llm.received) == 1


async def test_forbidden_is_permanent_when_server_returns_403(llm: CompletionsServer) -> None:
    llm.queue(error(403, "Project does not have access to model gpt-4o-mini"))

    with pytest.raises(Permanent, match=r"rejected the API key \(HTTP 403.*does not have access"):
        await make_provider(llm.base_url, RecordedSleep()).complete(make_request())


async def test_bad_request_is_permanent_with_server_message_when_server_returns_400(
    llm: CompletionsServer,
) -> None:
    llm.queue(error(400, "Invalid schema for function 'run_command': 'strng' is not valid"))

    with pytest.raises(Permanent) as caught:
        await make_provider(llm.base_url, RecordedSleep()).complete(make_request())

    assert "HTTP 400" in str(caught.value)
    assert "Invalid schema for function 'run_command'" in str(caught.value)
    assert len(llm.received) == 1


async def test_usage_is_parsed_with_cached_tokens_when_server_reports_them(
    llm: CompletionsServer,
) -> None:
    reply = completion({"content": "ok"})
    body = json.loads(reply.body)
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 100}
    llm.queue(Reply(body=json.dumps(body).encode()))

    response = await make_provider(llm.base_url, RecordedSleep()).complete(make_request())

    assert response.usage == Usage(120, 30, 100)


async def test_context_length_error_is_its_own_kind_when_server_says_the_window_is_full(
    llm: CompletionsServer,
) -> None:
    message = (
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 131072 tokens. Please reduce the length of the messages."
    )
    llm.queue(error(400, message, code="context_length_exceeded"))

    with pytest.raises(ContextLengthExceeded, match="maximum context length"):
        await make_provider(llm.base_url, RecordedSleep()).complete(make_request())


async def test_max_tokens_is_sent_then_dropped_when_the_server_rejects_the_field(
    llm: CompletionsServer,
) -> None:
    llm.queue(
        error(400, "Unsupported parameter: 'max_tokens' is not supported with this model."),
        completion({"content": "ok"}),
        completion({"content": "again"}),
    )
    provider = make_provider(llm.base_url, RecordedSleep())
    request = replace(make_request(), max_tokens=512)

    first = await provider.complete(request)
    second = await provider.complete(request)

    assert (first.items, second.items) == ((AssistantText("ok"),), (AssistantText("again"),))
    sent = [r.json() for r in llm.received]
    assert [b.get("max_tokens") for b in sent] == [512, None, None]


async def test_unprocessable_is_permanent_with_detail_when_server_returns_422(
    llm: CompletionsServer,
) -> None:
    body = json.dumps({"detail": "messages.1.role: Input should be 'user'"}).encode()
    llm.queue(Reply(status=422, body=body))

    with pytest.raises(Permanent, match=r"HTTP 422.*Input should be 'user'"):
        await make_provider(llm.base_url, RecordedSleep()).complete(make_request())


GATEWAY_PAGE = (
    b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>"
    b"<h1>Bad Gateway</h1><p>upstream llm-pool-7.corp.internal:8443 did not answer</p>"
    b"</body></html>"
)
MALFORMED_200 = [
    (GATEWAY_PAGE, "HTML page instead of JSON"),
    (b"upstream connect error or disconnect/reset", "a body that is not JSON"),
    (b'{"id": "chatcmpl-1", "object": "chat.completion"}', "no 'choices'"),
    (b'{"choices": []}', "no 'choices'"),
    (b'{"error": {"message": "upstream exploded"}}', "server error: upstream exploded"),
    (b'{"choices": [{"index": 0}]}', "choices.0.message: Field required"),
]


@pytest.mark.parametrize(("body", "detail"), MALFORMED_200)
async def test_malformed_200_is_retried_then_succeeds_when_the_next_answer_is_a_completion(
    llm: CompletionsServer, body: bytes, detail: str
) -> None:
    sleep = RecordedSleep()
    llm.queue(Reply(body=body), completion({"content": "recovered"}))

    response = await make_provider(llm.base_url, sleep).complete(make_request())

    assert response.items == (AssistantText("recovered"),)
    assert len(llm.received) == 2 and len(sleep.delays) == 1


@pytest.mark.parametrize(("body", "detail"), MALFORMED_200)
async def test_malformed_200_is_a_provider_fault_that_quotes_nothing_when_it_persists(
    llm: CompletionsServer, body: bytes, detail: str, caplog: pytest.LogCaptureFixture
) -> None:
    llm.queue(Reply(body=body), Reply(body=body))

    with pytest.raises(ProviderUnavailable) as caught:
        await make_provider(llm.base_url, RecordedSleep(), max_retries=1).complete(make_request())

    message = str(caught.value)
    assert "failed after 2 attempt(s): HTTP 200 with" in message and detail in message
    assert "127.0.0.1" not in message and "corp.internal" not in message
    assert "<" not in message  # no byte of a page
    assert llm.base_url in caplog.text  # the address and the body are logged instead
    assert body[:40].decode() in caplog.text


async def test_failures_name_neither_the_address_nor_the_page_when_the_gateway_answers_html(
    llm: CompletionsServer, caplog: pytest.LogCaptureFixture
) -> None:
    llm.queue(Reply(status=502, body=GATEWAY_PAGE, headers={"content-type": "text/html"}))
    llm.queue(Reply(status=404, body=GATEWAY_PAGE))

    with pytest.raises(ProviderUnavailable) as outage:
        await make_provider(llm.base_url, RecordedSleep(), max_retries=0).complete(make_request())
    with pytest.raises(Permanent) as refused:
        await make_provider(llm.base_url, RecordedSleep()).complete(make_request())

    for error in (outage.value, refused.value):
        text = str(error)
        assert "127.0.0.1" not in text and "corp.internal" not in text and "<" not in text
        assert "HTML page instead of JSON" in text
    assert "HTTP 502" in str(outage.value) and "HTTP 404" in str(refused.value)
    assert "llm-pool-7.corp.internal" in caplog.text and llm.base_url in caplog.text


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [('{"command": "ls', "not valid JSON"), ('["ls"]', "not a JSON object")],
)
async def test_unreadable_tool_arguments_become_the_calls_error_when_server_sends_them(
    llm: CompletionsServer, arguments: str, problem: str
) -> None:
    call = {
        "id": "call_x",
        "type": "function",
        "function": {"name": "run_command", "arguments": arguments},
    }
    llm.queue(completion({"content": None, "tool_calls": [call]}))

    response = await make_provider(llm.base_url, RecordedSleep()).complete(make_request())

    (item,) = response.tool_calls
    assert (item.call_id, item.name, item.arguments) == ("call_x", "run_command", {})
    assert item.arguments_error is not None and problem in item.arguments_error


async def test_injected_transport_stays_open_when_provider_finishes_a_call(
    llm: CompletionsServer,
) -> None:
    llm.queue(completion({"content": "one"}), completion({"content": "two"}))
    async with httpx2.AsyncHTTPTransport() as transport:
        provider = make_provider(llm.base_url, RecordedSleep(), transport=transport)

        first = await provider.complete(make_request())
        second = await provider.complete(make_request())

    assert [first.items, second.items] == [(AssistantText("one"),), (AssistantText("two"),)]


def test_repr_leaves_out_the_key_when_provider_has_one() -> None:
    provider = OpenAIProvider("http://127.0.0.1:9/v1", "gpt-4o-mini", API_KEY)

    assert API_KEY not in repr(provider)


async def test_factory_reads_key_from_environment_when_api_key_env_is_set(
    llm: CompletionsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_TEST_MODEL_KEY", API_KEY)
    llm.queue(completion({"content": "hi"}))
    provider = build_provider(
        "openai", base_url=llm.base_url, model="gpt-4o-mini", api_key_env="KEEL_TEST_MODEL_KEY"
    )

    await provider.complete(make_request())

    assert llm.received[0].headers["authorization"] == f"Bearer {API_KEY}"


def test_factory_rejects_unknown_setting_when_building_openai() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'modle'"):
        build_provider("openai", base_url="http://127.0.0.1:9/v1", modle="x")


def test_factory_names_missing_setting_when_building_openai() -> None:
    with pytest.raises(ConfigError, match="'model'"):
        build_provider("openai", base_url="http://127.0.0.1:9/v1")


async def test_addresses_in_the_servers_words_are_left_out_when_a_proxy_names_its_upstream(
    llm: CompletionsServer,
) -> None:
    llm.queue(error(503, "upstream http://10.20.30.40:8000/v1/chat failed; retry later"))

    with pytest.raises(ProviderUnavailable) as caught:
        await make_provider(llm.base_url, RecordedSleep(), max_retries=0).complete(make_request())

    assert str(caught.value) == (
        "model provider failed after 1 attempt(s): HTTP 503: upstream [address] failed; "
        "retry later"
    )
