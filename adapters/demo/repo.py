"""The demo's sample repository: a bare origin with one failing test."""

from __future__ import annotations

from pathlib import Path

from adapters.emulators.github_git import branch_of, init_bare_repository

FILES = {
    "calc.py": '"""Tiny arithmetic helpers used by the checkout."""\n\n\n'
    "def add(a: int, b: int) -> int:\n    return a - b\n",
    # unittest, not pytest: `pip install keel-bot` (no dev extra) must be enough for the demo.
    # pytest runs these TestCase tests too, as other tests of Keel do.
    "test_calc.py": "import unittest\n\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_add_zero(self):\n        self.assertEqual(add(0, 0), 0)\n",
    "AGENTS.md": "# Working on this repository\n\nRun the tests with `python -m unittest -v`.\n",
    # What a review task of this repository reads (from main, in Keel's mirror).
    "REVIEW.md": "# Review rules\n\nEvery function needs a test in test_calc.py.\n",
    # Keel's setup step runs this once per workspace, before the agent starts. The demo needs
    # no network: the tests use the standard library's unittest, so nothing is installed.
    ".keel/setup.sh": "set -e\necho 'nothing to install: the tests need only the stdlib'\n",
}


def create_sample_repo(folder: Path) -> Path:
    """A bare repository ``acme/shop.git`` under ``folder`` whose main has a failing test."""
    return init_bare_repository(folder, "acme/shop", FILES, "main", "Add calc with a bug")


branch_head = branch_of
"""The sha a branch of a bare repository points at, or None."""
