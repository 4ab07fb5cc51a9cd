"""The `keel` CLI against a real database: exit codes and what operators see."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from tests.factories import make_spec

KEEL = [sys.executable, "-c", "from adapters.cli import main; main()"]


def _keel(*args: str, db_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KEEL_DATABASE_URL": db_url}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root)
    return subprocess.run(
        [*KEEL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


async def test_tasks_commands_list_show_and_cancel_when_a_task_exists(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    task = (await Scheduler(db).schedule(make_spec(message="fix the flaky test"))).task
    listed = _keel("tasks", "ls", db_url=db_url, cwd=tmp_path)
    assert listed.returncode == 0 and task.task_id in listed.stdout and "queued" in listed.stdout
    shown = _keel("tasks", "show", task.task_id, db_url=db_url, cwd=tmp_path)
    assert shown.returncode == 0 and "fix the flaky test" in shown.stdout
    canceled = _keel("tasks", "cancel", task.task_id, db_url=db_url, cwd=tmp_path)
    assert canceled.returncode == 0, canceled.stderr
    assert (await Scheduler(db).get(task.task_id)).cancel_requested_at is not None  # type: ignore[union-attr]
    missing = _keel("tasks", "show", "t_nope", db_url=db_url, cwd=tmp_path)
    assert missing.returncode == 1
    db.close()


def test_config_check_exits_2_naming_the_key_when_config_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "app.yaml"
    bad.write_text("github:\n  webhok_secret: x\n")
    result = _keel("config", "check", str(bad), db_url="sqlite://", cwd=tmp_path)
    assert result.returncode == 2
    assert "github.webhok_secret" in result.stderr


def test_config_check_disables_surfaces_when_secrets_are_missing(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env_free = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GITHUB_"))}
    result = subprocess.run(
        [*KEEL, "config", "check", str(root / "app.yaml")],
        env=env_free,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "slack: disabled" in result.stdout and "github: disabled" in result.stdout
