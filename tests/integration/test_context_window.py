"""Long tasks against a small context window: elision, compaction, context-length retries,
and the usage every call reports, on a real database with the scripted model."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.emulators.server import serve
from adapters.web.metrics import Metrics
from runtime.clock import SystemClock
from runtime.config import ModelPrice
from runtime.errors import ContextLengthExceeded, Retryable
from runtime.executor.accounting import Accounting
from runtime.executor.fitting import Window
from runtime.models.base import ModelRequest, ModelResponse, Usage, UserText
from runtime.models.scripted import SCRIPTED_CHARS_PER_TOKEN, ScriptedProvider
from runtime.models.size import request_chars
from runtime.reporting import ThreadReporter, spend_line
from runtime.store import executions, outbox, transcripts, usage
from runtime.store.records import TaskStatus
from tests.factories import make_spec
from tests.harness import Stack, agent, build_stack
from tests.integration.test_web_api import LOOPBACK, make_app

WINDOW = 4_000
OUTPUT_CHARS = 6_000  # 1,500 tokens a result
TURNS = 27  # 27 results of 1,500 tokens: over 10x the window


def long_script(turns: int = TURNS, size: int = OUTPUT_CHARS) -> dict[str, Any]:
    reads = [
        {
            "say": f"reading part {n}",
            "tool_calls": [{"name": "blob", "args": {"path": f"src/part{n}.py", "size": size}}],
        }
        for n in range(turns)
    ]
    last = {"expect_seen": [f"src/part{turns - 1}.py: line of output"], "say": "all parts read"}
    return {"scripts": [{"turns": [*reads, last]}]}


@dataclass
class Recording:
    """The scripted model, keeping every request it received; may refuse some as too long."""

    inner: ScriptedProvider
    refuse_turns: set[int] = field(default_factory=set)
    requests: list[ModelRequest] = field(default_factory=list)
    compaction_failures: int = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if request.purpose == "compaction" and self.compaction_failures:
            self.compaction_failures -= 1
            raise Retryable("503 from the provider", retry_after_s=0.05)
        if request.purpose == "turn" and request.turn in self.refuse_turns:
            self.refuse_turns.discard(request.turn)
            raise ContextLengthExceeded("This model's maximum context length is 4000 tokens")
        return await self.inner.complete(request)


def tokens(request: ModelRequest) -> int:
    return math.ceil(request_chars(request) / SCRIPTED_CHARS_PER_TOKEN)


def window_stack(db_url: str, folder: Path, provider: Recording, **limits: Any) -> Stack:
    stack = build_stack(db_url, folder, provider, agents={"default": agent(["blob"], **limits)})
    stack.ctx.window = Window(context_window=WINDOW, reply_tokens=256)
    price = ModelPrice(input_per_million=2.0, output_per_million=8.0)
    stack.ctx.accounting = Accounting("scripted", {"scripted": price})
    return stack


async def _summaries(stack: Stack, task_id: str) -> list[transcripts.TranscriptEntry]:
    entries = await stack.db.read(lambda s: transcripts.transcript(s, task_id))
    return [e for e in entries if e.kind == "summary"]


async def test_every_request_fits_the_window_when_tool_outputs_total_ten_windows(
    db_url: str, tmp_path: Path
) -> None:
    provider = Recording(ScriptedProvider.from_dict(long_script()))
    stack = window_stack(db_url, tmp_path, provider)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id, timeout=120)
    assert final.status is TaskStatus.succeeded, final.result
    assert TURNS * OUTPUT_CHARS / SCRIPTED_CHARS_PER_TOKEN >= 10 * WINDOW
    assert provider.requests
    assert max(tokens(r) for r in provider.requests) <= WINDOW
    turns = [r for r in provider.requests if r.purpose == "turn"]
    assert [r.turn for r in turns] == list(range(TURNS + 1))
    # The latest result is read whole; older ones were elided to a stub naming the call.
    last = turns[-1]
    texts = [getattr(i, "output", "") for i in last.items]
    assert any(t.startswith(f"src/part{TURNS - 1}.py") and len(t) == OUTPUT_CHARS for t in texts)
    assert any("output of blob" in t and "elided" in t for t in texts)
    assert await _summaries(stack, task.task_id), "the window was never compacted"


async def test_requests_fit_the_providers_own_count_when_its_tokens_are_denser_than_assumed(
    db_url: str, tmp_path: Path
) -> None:
    """A provider counting two characters a token: its reported usage calibrates the
    estimate, so the requests still fit the window as it counts them."""

    class Dense(Recording):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            response = await super().complete(request)
            prompt = math.ceil(request_chars(request) / 2)
            return replace(response, usage=Usage(prompt, 10))

    provider = Dense(ScriptedProvider.from_dict(long_script(turns=12, size=3_000)))
    stack = window_stack(db_url, tmp_path, provider)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id, timeout=60)
    assert final.status is TaskStatus.succeeded, final.result
    counted = [math.ceil(request_chars(r) / 2) for r in provider.requests]
    assert max(counted) <= WINDOW
    run = await stack.db.read(lambda s: executions.load_run(s, task.task_id))
    ratio = run.state.chars_per_token if run is not None else None
    assert ratio is not None and 1.9 <= ratio <= 2.1


async def test_context_length_refusal_compacts_once_and_retries_when_the_provider_refuses(
    db_url: str, tmp_path: Path
) -> None:
    provider = Recording(ScriptedProvider.from_dict(long_script(turns=4, size=600)), {3})
    stack = window_stack(db_url, tmp_path, provider)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded, final.result
    summaries = await _summaries(stack, task.task_id)
    assert len(summaries) == 1
    assert "blob" in summaries[0].payload["text"]
    compactions = [r for r in provider.requests if r.purpose == "compaction"]
    assert len(compactions) == 1
    retried = [r for r in provider.requests if r.purpose == "turn" and r.turn == 3]
    assert len(retried) == 2
    summary = retried[1].items[1]
    assert isinstance(summary, UserText) and "summary_of_earlier_work" in summary.text


async def test_a_compaction_is_retried_not_failed_when_the_provider_fails_transiently(
    db_url: str, tmp_path: Path
) -> None:
    provider = Recording(ScriptedProvider.from_dict(long_script(turns=4, size=600)), {3})
    provider.compaction_failures = 1
    stack = window_stack(db_url, tmp_path, provider)
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.succeeded, final.result
    assert len(await _summaries(stack, task.task_id)) == 1
    assert [r.purpose for r in provider.requests].count("compaction") == 2


async def test_usage_totals_equal_the_reported_usage_and_cost_follows_prices_when_a_task_ends(
    db_url: str, tmp_path: Path
) -> None:
    inner = ScriptedProvider.from_dict(long_script(turns=3, size=500))
    reported: list[tuple[int, int]] = []

    class Counting(Recording):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            response = await super().complete(request)
            assert response.usage is not None
            reported.append((response.usage.prompt_tokens, response.usage.completion_tokens))
            return response

    stack = window_stack(db_url, tmp_path, Counting(inner))
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    await stack.run_until_terminal(task.task_id)
    totals = await stack.db.read(lambda s: usage.task_totals(s, task.task_id))
    prompt = sum(p for p, _ in reported)
    completion = sum(c for _, c in reported)
    assert (totals.calls, totals.prompt_tokens, totals.completion_tokens) == (
        len(reported), prompt, completion
    )
    assert math.isclose(totals.cost_usd, (prompt * 2.0 + completion * 8.0) / 1e6)


async def test_usage_and_summary_are_shown_in_api_ui_metrics_and_reply_when_a_task_compacted(
    db_url: str, tmp_path: Path
) -> None:
    provider = Recording(ScriptedProvider.from_dict(long_script(turns=4, size=600)), {3})
    stack = window_stack(db_url, tmp_path, provider)
    metrics = Metrics()
    stack.ctx.observe_model_call = metrics.observe_model_call
    stack.ctx.reporter = ThreadReporter(SystemClock())
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    await stack.run_until_terminal(task.task_id)
    totals = await stack.db.read(lambda s: usage.task_totals(s, task.task_id))
    summary = (await _summaries(stack, task.task_id))[0].payload["text"]
    with serve(make_app(stack, LOOPBACK, metrics)) as running:
        async with httpx.AsyncClient(base_url=running.url) as http:
            api = (await http.get(f"/api/tasks/{task.task_id}")).json()
            ui = (await http.get(f"/ui/tasks/{task.task_id}")).text
            scraped = (await http.get("/metrics")).text
    assert api["usage"]["prompt_tokens"] == totals.prompt_tokens > 0
    assert api["usage"]["cost_usd"] == pytest.approx(totals.cost_usd)
    assert api["tree_usage"]["total_tokens"] == totals.total_tokens
    assert [c["purpose"] for c in api["model_calls"]].count("compaction") == 1
    assert "summary of earlier work" in ui and html.escape(summary) in ui
    assert f'data-tokens="{totals.total_tokens}"' in ui
    assert f'keel_model_tokens_total{{kind="prompt"}} {float(totals.prompt_tokens)}' in scraped
    assert 'keel_model_call_seconds_count{purpose="compaction"} 1.0' in scraped
    assert 'keel_model_call_seconds_count{purpose="turn"} 5.0' in scraped
    posts = await stack.db.read(lambda s: outbox.posts_of_task(s, task.task_id))
    [reply] = [p for p in posts if p.purpose == "completion"]
    assert reply.body.endswith(f"_{spend_line(totals)}_")
    assert spend_line(totals).endswith("· 5 turns")
