"""The network, setup and secrets settings: what each form means, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adapters.config import build_config
from runtime.config import AgentConfig, authority_beyond
from runtime.errors import ConfigError
from runtime.workspace.egress import PACKAGE_REGISTRIES, Egress


def test_yaml_off_and_on_mean_the_words_not_booleans() -> None:
    tree = yaml.safe_load("agents: {a: {network: off}, b: {network: on}, default: {}}")
    agents = build_config(tree, env={}).agents
    modes = [agents[n].egress().mode for n in ("a", "b", "default")]
    assert modes == ["off", "on", "off"]


def test_allow_network_is_the_older_spelling_of_network_on() -> None:
    assert AgentConfig(allow_network=True).egress() == Egress("on")
    with pytest.raises(ValueError, match="not allow_network as well"):
        AgentConfig(allow_network=True, network="allowlist")


def test_allow_needs_an_allowlist_and_valid_entries() -> None:
    with pytest.raises(ValueError, match="set network: allowlist"):
        AgentConfig(allow=("pypi.org",))
    with pytest.raises(ValueError):
        AgentConfig(network="allowlist", allow=("http://pypi.org/",))
    agent = AgentConfig(network="allowlist", allow=("PyPI.org.",))
    assert agent.egress() == Egress("allowlist", ("pypi.org",))


def test_a_child_may_not_reach_further_than_its_parent() -> None:
    off, on = AgentConfig(), AgentConfig(network="on")
    narrow = AgentConfig(network="allowlist", allow=("pypi.org",))
    wide = AgentConfig(network="allowlist", allow=("pypi.org", "evil.test"))
    assert authority_beyond(off, narrow) == ["network allowlist (the parent's is off)"]
    assert authority_beyond(narrow, wide) == ["network host evil.test"]
    assert authority_beyond(wide, narrow) == [] and authority_beyond(on, wide) == []


def test_repository_defaults_and_secret_forms() -> None:
    tree = {
        "workspace": {
            "repositories": {
                "acme/api": {
                    "url": "/tmp/x",
                    "secrets": {"A": "${A_VALUE}", "B": {"value": "b-value", "agent": True}},
                }
            }
        }
    }
    repo = build_config(tree, env={"A_VALUE": "a-value"}).workspace.repositories["acme/api"]
    assert repo.network == "allowlist" and repo.allow == PACKAGE_REGISTRIES
    assert repo.setup is None and repo.setup_timeout_s == 1800
    assert repo.secrets["A"].value.get_secret_value() == "a-value" and not repo.secrets["A"].agent
    assert repo.secrets["B"].agent
    assert "a-value" not in repr(repo) and "b-value" not in repr(repo)


def test_a_bad_secret_name_is_refused() -> None:
    tree = {"workspace": {"repositories": {"r": {"url": "/x", "secrets": {"1BAD": "v"}}}}}
    with pytest.raises(ConfigError, match="secrets"):
        build_config(tree, env={})


def test_a_narrowed_network_without_a_sandbox_is_refused(tmp_path: Path) -> None:
    tree = {
        "workspace": {"sandbox": "none"},
        "agents": {"default": {"network": "allowlist", "allow": ["pypi.org"]}},
    }
    with pytest.raises(ConfigError, match="cannot be enforced"):
        build_config(tree, env={})
    build_config({"workspace": {"sandbox": "none"}}, env={})  # the defaults: only a warning


def test_cache_root_defaults_beside_the_workspaces() -> None:
    tree = {"workspace": {"root": "/srv/keel/workspaces"}}
    assert build_config(tree, env={}).workspace.cache_root == Path("/srv/keel/cache")
