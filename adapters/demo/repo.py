"""The demo's sample repository: a bare origin with one failing test."""

from __future__ import annotations

import subprocess
from pathlib import Path

FILES = {
    "calc.py": '"""Tiny arithmetic helpers used by the checkout."""\n\n\n'
    "def add(a: int, b: int) -> int:\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_zero():\n    assert add(0, 0) == 0\n",
    "AGENTS.md": "# Working on this repository\n\nRun the tests with `python -m pytest -q`.\n",
}


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def create_sample_repo(folder: Path) -> Path:
    """A bare repository ``acme/shop.git`` under ``folder`` whose main has a failing test."""
    bare = folder / "acme" / "shop.git"
    seed = folder / "seed"
    bare.parent.mkdir(parents=True, exist_ok=True)
    _git("init", "--bare", "-q", "-b", "main", str(bare), cwd=folder)
    _git("init", "-q", "-b", "main", str(seed), cwd=folder)
    for name, content in FILES.items():
        (seed / name).write_text(content)
    _git("add", "-A", cwd=seed)
    ident = ["-c", "user.name=Demo", "-c", "user.email=demo@example.invalid"]
    _git(*ident, "commit", "-q", "-m", "Add calc with a bug", cwd=seed)
    _git("push", "-q", str(bare), "main", cwd=seed)
    return bare


def branch_head(bare: Path, branch: str) -> str | None:
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
        cwd=bare,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or None
