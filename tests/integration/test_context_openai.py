"""The context window over the OpenAI wire: a server that refuses a request as too long gets
one compaction (its own recorded call) and the same turn again; the usage it reports is what
the task's totals add up to."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.models.openai import OpenAIProvider
from runtime.store import transcripts, usage
from runtime.store.records import TaskStatus
from tests.factories import make_spec
from tests.harness import agent, build_stack
from tests.integration import test_openai_provider as wire
from tests.integration.test_openai_provider import CompletionsServer, completion, error

# The loopback chat-completions server and its per-test reset, as fixtures of this module.
running_server = wire.running_server
llm = wire.llm


def _lookup(call_id: str) -> dict[str, object]:
    return {
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"key": call_id})},
            }
        ],
    }


async def test_context_length_refusal_compacts_once_and_the_turn_succeeds_when_over_http(
    llm: CompletionsServer, db_url: str, tmp_path: Path
) -> None:
    too_long = (
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9001 tokens. Please reduce the length of the messages."
    )
    llm.queue(
        completion(_lookup("call_a")),
        completion(_lookup("call_b")),
        error(400, too_long, code="context_length_exceeded"),
        completion({"content": "Looked up call_a; call_b is next."}),
        completion({"content": "both values are known"}),
    )
    provider = OpenAIProvider(llm.base_url, "gpt-4o-mini", api_key="sk-test", max_retries=0)
    stack = build_stack(db_url, tmp_path, provider, agents={"default": agent(["lookup"])})
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded, final.result
    sent = [r.json() for r in llm.received]
    assert len(sent) == 5
    assert all(body["max_tokens"] == 4_096 for body in sent)
    summary_request, retried = sent[3], sent[4]
    assert "summarising" in summary_request["messages"][0]["content"]
    assert "tools" not in summary_request
    assert "Looked up call_a" in json.dumps(retried["messages"])
    assert len(retried["messages"]) < len(sent[2]["messages"])
    entries = await stack.db.read(lambda s: transcripts.transcript(s, task.task_id))
    assert [e.kind for e in entries].count("summary") == 1
    totals = await stack.db.read(lambda s: usage.task_totals(s, task.task_id))
    assert (totals.calls, totals.prompt_tokens, totals.completion_tokens) == (4, 480, 120)
