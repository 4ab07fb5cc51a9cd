"""The CLI as a person installing Keel meets it: the demo's prerequisites, ``--config``,
``keel tasks`` output for people (Rich tables, a growing transcript) and for scripts (--json).

Each test runs the real ``keel`` in a subprocess against a real database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEEL = [sys.executable, "-c", "from adapters.cli import main; main()"]


def keel(
    *args: str, cwd: Path, db_url: str | None = None, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "GITHUB_", "KEEL_DATABASE_URL"))
    }
    env["PYTHONPATH"] = str(ROOT)
    if db_url is not None:
        env["KEEL_DATABASE_URL"] = db_url
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [*KEEL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_demo_without_git_names_what_is_missing_and_exits_1(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    result = keel("demo", "--workdir", str(tmp_path / "demo"), cwd=tmp_path, path=str(empty))
    assert result.returncode == 1
    assert "keel demo needs git on PATH" in result.stderr
    assert not (tmp_path / "demo").exists()  # it stopped before creating anything


def test_a_config_path_that_does_not_exist_exits_2_and_never_falls_back(tmp_path: Path) -> None:
    # A ./app.yaml that would load (its database does not exist, so tasks ls would exit 2 too,
    # but naming the database): the error must be about --config, not a fallback to this file.
    (tmp_path / "app.yaml").write_text("database:\n  url: sqlite:///./here.db\n")
    for argv in (["tasks", "ls"], ["db", "upgrade"], ["cache", "ls"]):
        result = keel(*argv, "--config", "missing.yaml", cwd=tmp_path)
        assert result.returncode == 2, (argv, result.stderr)
        assert "--config missing.yaml does not exist" in result.stderr
        assert str(tmp_path / "missing.yaml") in result.stderr
    assert not (tmp_path / "here.db").exists()  # db upgrade did not create ./app.yaml's
    folder = keel("tasks", "ls", "--config", str(tmp_path), cwd=tmp_path)
    assert folder.returncode == 2 and "is a directory" in folder.stderr
