"""Which agent a request runs as: configuration decides (``routing.agent``, per channel, per
repository), a chooser may name one with ``agent=<name>``, and ``keel config check`` refuses
a configuration under which a request could reach an agent nobody configured."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.config import build_config, describe
from routing.config import DaemonsConfig, RoutingConfig
from routing.policy import AgentChoice, RoutingPolicy
from routing.router import NewTask, RoutingView, decide
from runtime.errors import ConfigError
from runtime.threads import GitHubIssue, SlackThread
from tests.factories import make_signal

OPS = SlackThread("T1", "COPS", "1700000000.000100")
API = GitHubIssue("acme/api", 7)
WEB = GitHubIssue("acme/web", 3)
AGENTS = ("default", "coder", "reviewer", "ops")


def policy(**routing: Any) -> RoutingPolicy:
    return RoutingPolicy.from_config(RoutingConfig(**routing), DaemonsConfig(), agents=AGENTS)


@pytest.mark.parametrize(
    ("routing", "thread", "agent"),
    [
        ({}, OPS, "default"),
        ({"agent": "coder"}, OPS, "coder"),
        ({"agent": "coder", "channel_agents": {"COPS": "ops"}}, OPS, "ops"),
        ({"agent": "coder", "repo_agents": {"acme/api": "reviewer"}}, API, "reviewer"),
        ({"agent": "coder", "repo_agents": {"acme/api": "reviewer"}}, WEB, "coder"),
        # A channel mapped to a repository takes that repository's agent.
        (
            {"channel_repos": {"COPS": "acme/api"}, "repo_agents": {"ACME/api": "reviewer"}},
            OPS,
            "reviewer",
        ),
    ],
)
def test_agent_comes_from_configuration_when_routed(
    routing: dict[str, Any], thread: SlackThread | GitHubIssue, agent: str
) -> None:
    assert policy(**routing).agent_for(thread, ("U1", "alice"), "fix it").agent == agent


@pytest.mark.parametrize(
    ("choosers", "text", "choice"),
    [
        (("alice",), "agent=reviewer look at #7", AgentChoice("reviewer", "look at #7")),
        (("U1",), "please agent=ops  restart it", AgentChoice("ops", "please restart it")),
        # Not a chooser: the words stay, the configured agent runs.
        (("bob",), "agent=reviewer look", AgentChoice("coder", "agent=reviewer look")),
        # Not a configured agent: nothing is chosen.
        (("alice",), "agent=root look", AgentChoice("coder", "agent=root look")),
        (("alice",), "myagent=ops look", AgentChoice("coder", "myagent=ops look")),
    ],
)
def test_agent_named_in_the_request_only_by_a_chooser_when_configured(
    choosers: tuple[str, ...], text: str, choice: AgentChoice
) -> None:
    routed = policy(agent="coder", agent_choosers=choosers)
    assert routed.agent_for(OPS, ("U1", "Alice"), text) == choice


@pytest.mark.parametrize(
    ("text", "agent", "message"),
    [
        ("agent=reviewer check the diff", "reviewer", "check the diff"),
        ("new: agent=reviewer check the diff", "reviewer", "check the diff"),
        ("check the diff", "coder", "check the diff"),
    ],
)
def test_new_task_runs_as_the_routed_agent_when_decided(
    text: str, agent: str, message: str
) -> None:
    signal = make_signal(addresses_bot=True, text=text)  # from alice, U1
    route = decide(signal, RoutingView(), policy(agent="coder", agent_choosers=("U1",)))
    assert isinstance(route, NewTask)
    assert (route.agent, route.message) == (agent, message)


def test_only_agent_is_the_request_agent_when_none_is_named_default() -> None:
    config = build_config({"agents": {"coder": {"require_approval": ["git_push"]}}}, {})
    assert config.routing.request_agent(config.agents) == "coder"
    assert any("requests run as coder" in line for line in describe(config))


@pytest.mark.parametrize(
    ("tree", "problem"),
    [
        ({"agents": {"coder": {}, "reviewer": {}}}, r"routing\.agent: not set"),
        ({"agents": {"coder": {}}, "routing": {"agent": "default"}}, r"unknown agent 'default'"),
        (
            {"agents": {"coder": {}}, "routing": {"channel_agents": {"C1": "ops"}}},
            r"routing\.channel_agents\.C1: unknown agent 'ops'",
        ),
        (
            {"agents": {"coder": {}}, "routing": {"repo_agents": {"acme/api": "ops"}}},
            r"routing\.repo_agents\.acme/api: unknown agent 'ops'",
        ),
    ],
)
def test_config_refused_when_a_request_could_reach_no_configured_agent(
    tree: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        build_config(tree, {})
