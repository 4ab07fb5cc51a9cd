"""DAEMON.md files: exactly the known front-matter keys, the body as the brief."""

from __future__ import annotations

from pathlib import Path

import pytest

from routing.config import DaemonsConfig, RoutingConfig
from routing.daemons import DaemonFileError, load_repo_daemons, parse_daemon_file
from routing.policy import RoutingPolicy

GOOD = """---
id: ci-doctor
purpose: Diagnose failed CI runs on main and propose a fix.
watch:
  - {provider: github, kind: check_run, branch: main, conclusion: failure}
routines: [summarise-flaky-tests]
deny: [git_push]
schedule: "0 6 * * 1"
---
# CI doctor

Read the failing job's log first.
"""


def daemon_file(root: Path, daemon_id: str, text: str) -> Path:
    path = root / ".agents" / "daemons" / daemon_id / "DAEMON.md"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_daemon_file_is_rejected_naming_the_key_when_front_matter_has_unknown_key() -> None:
    text = GOOD.replace("deny: [git_push]", "deny: [git_push]\nlimits: {max_turns: 3}")
    with pytest.raises(DaemonFileError, match=r"unknown front-matter key 'limits'") as caught:
        parse_daemon_file(text, source=".agents/daemons/ci-doctor/DAEMON.md")
    assert str(caught.value).startswith(".agents/daemons/ci-doctor/DAEMON.md:")


def test_daemon_file_is_rejected_naming_the_key_when_a_required_key_is_missing() -> None:
    text = GOOD.replace("purpose: Diagnose failed CI runs on main and propose a fix.\n", "")
    with pytest.raises(DaemonFileError, match="missing front-matter key purpose"):
        parse_daemon_file(text, source="DAEMON.md")


def test_daemon_file_is_rejected_naming_the_rule_key_when_a_watch_rule_has_unknown_key() -> None:
    text = GOOD.replace("conclusion: failure}", "conclusion: failure, colour: red}")
    with pytest.raises(DaemonFileError, match=r"watch\[0\]\.colour: unknown key"):
        parse_daemon_file(text, source="DAEMON.md")


def test_daemon_file_is_rejected_when_there_is_no_front_matter() -> None:
    with pytest.raises(DaemonFileError, match="must start with a '---'"):
        parse_daemon_file("# just a brief\n", source="DAEMON.md")


def test_daemon_file_is_rejected_when_front_matter_is_not_closed() -> None:
    with pytest.raises(DaemonFileError, match="no closing '---'"):
        parse_daemon_file(GOOD.replace("---\n# CI doctor", "# CI doctor"), source="DAEMON.md")


def test_daemon_file_yields_definition_and_brief_when_valid() -> None:
    daemon = parse_daemon_file(GOOD, source="DAEMON.md", repo="acme/api")
    assert daemon.daemon_id == "ci-doctor"
    assert daemon.objective_key == "daemon:ci-doctor"
    assert daemon.routines == ("summarise-flaky-tests",)
    assert daemon.deny == ("git_push",)
    assert daemon.schedule == "0 6 * * 1"
    assert daemon.brief == "# CI doctor\n\nRead the failing job's log first."
    # A rule without a repository is scoped to the repository the file came from.
    assert [rule.repo for rule in daemon.watch] == ["acme/api"]


def test_repo_daemons_are_loaded_from_agents_folder_when_present(tmp_path: Path) -> None:
    daemon_file(tmp_path, "ci-doctor", GOOD)
    daemons = load_repo_daemons(tmp_path, repo="acme/api")
    assert [d.daemon_id for d in daemons] == ["ci-doctor"]
    assert daemons[0].source == ".agents/daemons/ci-doctor/DAEMON.md"
    assert load_repo_daemons(tmp_path / "elsewhere") == ()


def test_repo_daemon_is_rejected_when_id_differs_from_its_folder(tmp_path: Path) -> None:
    daemon_file(tmp_path, "doctor", GOOD)
    with pytest.raises(DaemonFileError, match="does not match its folder 'doctor'"):
        load_repo_daemons(tmp_path)


def test_policy_refuses_a_daemon_defined_twice_when_config_and_repo_share_an_id() -> None:
    config = DaemonsConfig.model_validate(
        {"roles": [{"id": "ci-doctor", "purpose": "x", "watch": [{"provider": "github"}]}]}
    )
    repo_daemon = parse_daemon_file(GOOD, source="acme/api:DAEMON.md")
    with pytest.raises(ValueError, match="'ci-doctor' is defined twice"):
        RoutingPolicy.from_config(RoutingConfig(), config, repo_daemons=[repo_daemon])
