"""An agent with a model of its own: its calls go to its provider over real HTTP, are priced
at its prices, and each recorded call names its model; other agents keep the default."""

from __future__ import annotations

import json
from pathlib import Path

from adapters.assembly import Keel
from adapters.config import build_config
from runtime.config import ModelPrice
from runtime.executor.accounting import Accounting
from runtime.executor.context import ModelSetup
from runtime.executor.fitting import Window
from runtime.models.anthropic import AnthropicProvider
from runtime.models.scripted import ScriptedProvider
from runtime.store import usage
from runtime.store.records import TaskStatus
from tests.factories import make_spec
from tests.harness import agent, build_stack
from tests.integration import test_openai_provider as wire
from tests.integration.test_anthropic_provider import message, root
from tests.integration.test_openai_provider import CompletionsServer

running_server = wire.running_server
llm = wire.llm

DEFAULT_SCRIPT = {"scripts": [{"turns": [{"say": "done by the default model"}]}]}


async def test_agents_own_model_answers_its_calls_and_is_recorded_when_it_names_one(
    llm: CompletionsServer, db_url: str, tmp_path: Path
) -> None:
    llm.queue(message({"type": "text", "text": "reviewed"}))
    stack = build_stack(
        db_url,
        tmp_path,
        ScriptedProvider.from_dict(DEFAULT_SCRIPT),
        agents={"default": agent([]), "reviewer": agent([])},
    )
    price = ModelPrice(input_per_million=3.0, output_per_million=15.0)
    stack.ctx.agent_models = {
        "reviewer": ModelSetup(
            AnthropicProvider("claude-keel-test", "sk-ant-test", root(llm), max_retries=0),
            Window(context_window=200_000, reply_tokens=1_024),
            Accounting("claude-keel-test", {"claude-keel-test": price}),
        )
    }
    schedule = stack.scheduler.schedule
    reviewed = (await stack.scheduler.transact(schedule, make_spec(agent="reviewer"))).task
    fixed = (await stack.scheduler.transact(schedule, make_spec(objective_key="other"))).task

    for task in (reviewed, fixed):
        final = await stack.run_until_terminal(task.task_id)
        assert final.status is TaskStatus.succeeded, final.result

    [sent] = llm.received
    assert sent.path == "/v1/messages" and json.loads(sent.body)["max_tokens"] == 1_024
    [call] = await stack.db.read(lambda s: usage.calls_of(s, reviewed.task_id))
    assert call.model == "claude-keel-test"
    assert call.cost_usd == (2095 * 3.0 + 503 * 15.0) / 1_000_000
    [default_call] = await stack.db.read(lambda s: usage.calls_of(s, fixed.task_id))
    assert default_call.model == "" and default_call.cost_usd == 0.0


async def test_keel_builds_each_agents_own_model_from_config(db_url: str, tmp_path: Path) -> None:
    tree = {
        "database": {"url": db_url},
        "model": {"provider": "scripted"},
        "workspace": {"root": str(tmp_path / "ws"), "sandbox": "none"},
        "agents": {
            "default": {},
            "claude": {
                "model": {
                    "provider": "anthropic",
                    "model": "claude-keel-test",
                    "api_key": "sk-ant-secret-77",
                    "context_window": 200_000,
                    "max_output_tokens": 2_048,
                }
            },
        },
    }
    keel = Keel(build_config(tree, env={}))
    keel.migrate()
    await keel.connect()

    ctx = keel.worker.runner.ctx
    own, default = ctx.model_for("claude"), ctx.model_for("default")
    assert isinstance(own.provider, AnthropicProvider)
    assert (own.provider.model, own.provider.base_url) == (
        "claude-keel-test",
        "https://api.anthropic.com",
    )
    assert (own.window.context_window, own.window.reply_tokens) == (200_000, 2_048)
    assert own.accounting.model == "claude-keel-test"
    assert "sk-ant-secret-77" not in repr(own.provider)
    assert default.provider is ctx.provider and not isinstance(default.provider, AnthropicProvider)
