"""The demo's sample repository: a bare origin with one failing test."""

from __future__ import annotations

from pathlib import Path

from adapters.emulators.github_git import branch_of, init_bare_repository

FILES = {
    "calc.py": '"""Tiny arithmetic helpers used by the checkout."""\n\n\n'
    "def add(a: int, b: int) -> int:\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_zero():\n    assert add(0, 0) == 0\n",
    "AGENTS.md": "# Working on this repository\n\nRun the tests with `python -m pytest -q`.\n",
    # Keel's setup step runs this once per workspace, before the agent starts. The demo needs
    # no network: pytest comes with the interpreter that runs Keel, so nothing is installed.
    ".keel/setup.sh": "set -e\necho 'nothing to install: pytest comes with the host toolchain'\n",
}


def create_sample_repo(folder: Path) -> Path:
    """A bare repository ``acme/shop.git`` under ``folder`` whose main has a failing test."""
    return init_bare_repository(folder, "acme/shop", FILES, "main", "Add calc with a bug")


branch_head = branch_of
"""The sha a branch of a bare repository points at, or None."""
