"""How an evidence row reads in a reply, the task UI and the CLI: test runs name their
programs, not the host paths of the toolchain they came from."""

from __future__ import annotations

import sys

import pytest

from runtime.evidence import EvidenceItem, Strength
from runtime.reporting import describe_evidence, shown_command


def run_of(command: str) -> EvidenceItem:
    detail = {"command": command, "exit_code": 0, "passed": 2, "failed": 0}
    return EvidenceItem("test_run", "exec-1", Strength.tool_reported, detail)


def test_a_test_run_row_names_the_interpreter_not_its_host_path() -> None:
    line = describe_evidence(run_of(f"{sys.executable} -m unittest -v"))
    name = sys.executable.rsplit("/", 1)[1]
    assert line == f"`{name} -m unittest -v` exit 0, 2 passed — tool said"
    assert sys.prefix not in line


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("/home/me/.venv/bin/python -m pytest -q", "python -m pytest -q"),
        ("  /root/.pyenv/versions/3.11.7/bin/python3 -V", "  python3 -V"),
        ("cd app && /usr/local/bin/npm test", "cd app && npm test"),
        ("make lint; /opt/tools/bin/tox -e py|tee log", "make lint; tox -e py|tee log"),
        ("(/opt/bin/go test ./...)", "(go test ./...)"),
        # Arguments stay as they are, paths and all: only the program word is shortened.
        ("cat /usr/bin/env", "cat /usr/bin/env"),
        ("python -m pytest tests/bin/test_cli.py", "python -m pytest tests/bin/test_cli.py"),
        ("./bin/run-tests", "./bin/run-tests"),
        ("/srv/app/run.sh", "/srv/app/run.sh"),
    ],
)
def test_only_toolchain_programs_are_shortened(command: str, shown: str) -> None:
    assert shown_command(command) == shown


def test_the_evidence_keeps_the_command_as_it_ran() -> None:
    item = run_of("/home/me/.venv/bin/python -m pytest")
    describe_evidence(item)
    assert item.detail["command"] == "/home/me/.venv/bin/python -m pytest"
