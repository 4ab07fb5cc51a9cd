"""A daemon's role as an agent: its base agent narrowed by deny, limits and purpose."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from routing.config import DEFAULT_IDLE_LIFETIME_S, DaemonsConfig
from routing.daemons import (
    daemon_agents,
    daemon_from_config,
    daemon_residency,
    parse_daemon_file,
)
from runtime.config import AgentConfig, AgentLimits
from runtime.errors import ConfigError

BASE = AgentConfig(
    instructions="You are Keel.",
    tools=("read_file", "git_commit", "git_push", "open_pull_request"),
    limits=AgentLimits(max_turns=30, max_tool_calls=50, fanout=3),
)
TOOLS = ("read_file", "git_commit", "git_push")  # open_pull_request: GitHub not enabled


def roles(*overrides: dict[str, Any], **section: Any) -> DaemonsConfig:
    made = []
    for index, override in enumerate(overrides):
        role: dict[str, Any] = {
            "id": f"role-{index}",
            "agent": "fixer",
            "purpose": f"Purpose of role {index}.",
            "watch": [{"provider": "github", "kind": "check_run"}],
        }
        role.update(override)
        made.append(role)
    return DaemonsConfig.model_validate({"roles": made, **section})


def agents_of(config: DaemonsConfig) -> dict[str, AgentConfig]:
    daemons = [daemon_from_config(role) for role in config.roles]
    return daemon_agents(daemons, {"fixer": BASE}, TOOLS)


def test_role_agent_lacks_denied_tools_and_keeps_the_rest_when_deny_is_set() -> None:
    [(name, role)] = agents_of(roles({"deny": ["git_push", "open_pull_request"]})).items()
    assert name == "daemon:role-0"
    assert role.tools == ("read_file", "git_commit")


def test_role_limits_override_only_the_keys_given_when_limits_are_partial() -> None:
    [role] = agents_of(roles({"limits": {"max_turns": 4}})).values()
    assert (role.limits.max_turns, role.limits.max_tool_calls, role.limits.fanout) == (4, 50, 3)


def test_role_instructions_carry_purpose_and_brief_after_the_base_instructions() -> None:
    text = (
        "---\nid: ci-doctor\npurpose: Mend red builds.\n"
        "watch: [{provider: github, kind: check_run}]\n---\nRead the log first.\n"
    )
    daemon = parse_daemon_file(text, source="DAEMON.md", agent="fixer")
    [role] = daemon_agents([daemon], {"fixer": BASE}, TOOLS).values()
    assert role.instructions.startswith("You are Keel.")
    assert "'ci-doctor'" in role.instructions and "Mend red builds." in role.instructions
    assert role.instructions.endswith("Read the log first.")


def test_deny_is_refused_naming_the_tool_when_it_names_no_known_tool() -> None:
    with pytest.raises(ConfigError, match=r"daemon role-0 .*unknown tool git-push"):
        agents_of(roles({"deny": ["git-push"]}))


def test_role_idle_lifetime_overrides_the_section_default_when_set() -> None:
    config = roles({"idle_lifetime_s": 60}, {}, idle_lifetime_s=600)
    daemons = [daemon_from_config(role) for role in config.roles]
    residency = daemon_residency(daemons, config.idle_lifetime_s)
    assert residency == {"daemon:role-0": 60, "daemon:role-1": 600}
    assert DaemonsConfig().idle_lifetime_s == DEFAULT_IDLE_LIFETIME_S


@pytest.mark.parametrize("value", [0, -5, "soon"])
def test_idle_lifetime_is_rejected_when_not_a_positive_number(value: object) -> None:
    with pytest.raises(ValidationError, match="idle_lifetime_s"):
        roles({}, idle_lifetime_s=value)
    with pytest.raises(ValidationError, match="idle_lifetime_s"):
        roles({"idle_lifetime_s": value})
