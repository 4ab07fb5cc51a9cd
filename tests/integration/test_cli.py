"""The `keel` CLI against a real database: exit codes and what operators see."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from runtime.scheduler import Scheduler
from runtime.store import usage
from runtime.store.engine import Database
from runtime.store.records import TaskResult, TaskStatus
from runtime.store.usage import ModelCall
from runtime.workspace.envcache import EnvCache
from tests.factories import app_key_pair, make_spec
from tests.harness import schedule_task

KEEL = [sys.executable, "-c", "from adapters.cli import main; main()"]


ROOT = Path(__file__).resolve().parents[2]


def _env(db_url: str | None) -> dict[str, str]:
    """The environment with no surface secrets, and the database URL only when given."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "GITHUB_", "KEEL_DATABASE_URL"))
    }
    env["PYTHONPATH"] = str(ROOT)
    return env if db_url is None else {**env, "KEEL_DATABASE_URL": db_url}


def _keel(*args: str, db_url: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KEEL, *args], env=_env(db_url), cwd=cwd, capture_output=True, text=True, timeout=60
    )


async def test_task_text_is_shown_as_written_never_as_markup_or_terminal_codes(
    db_url: str, tmp_path: Path
) -> None:
    """A request is anyone's text: Rich markup in it is printed, not read (``[/x]`` used to
    stop ``keel tasks ls``), and an escape sequence never reaches the terminal."""
    db = Database.from_url(db_url)
    task = await schedule_task(db, message="fix [/x] and [link=https://evil.example]me[/link]\x1b]52;c;cHduZWQ=\x07")
    listed = _keel("tasks", "ls", db_url=db_url, cwd=tmp_path)
    shown = _keel("tasks", "show", task.task_id, db_url=db_url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "[/x]" in listed.stdout and "[link=" in listed.stdout
    assert shown.returncode == 0 and "[/x]" in shown.stdout
    assert "\x1b" not in listed.stdout + shown.stdout and "\x07" not in shown.stdout


async def test_tasks_commands_list_show_and_cancel_when_a_task_exists(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    task = await schedule_task(db, message="fix the flaky test")
    listed = _keel("tasks", "ls", db_url=db_url, cwd=tmp_path)
    assert listed.returncode == 0 and task.task_id in listed.stdout and "queued" in listed.stdout
    shown = _keel("tasks", "show", task.task_id, db_url=db_url, cwd=tmp_path)
    assert shown.returncode == 0 and "fix the flaky test" in shown.stdout
    assert "model usage: no model calls yet" in shown.stdout
    call = ModelCall("turn:0", "turn", "gpt-4o-mini", 12_000, 400, 2_000, 0.0031, 1.5)
    await db.run(lambda s: usage.record_call(s, task.task_id, task.root_id, call, task.created_at))
    shown = _keel("tasks", "show", task.task_id, db_url=db_url, cwd=tmp_path)
    assert "model usage: 12,400 tokens (12,000 in, 2,000 cached, 400 out)" in shown.stdout
    assert "$0.0031 · 1 model call" in shown.stdout
    canceled = _keel("tasks", "cancel", task.task_id, db_url=db_url, cwd=tmp_path)
    assert canceled.returncode == 0, canceled.stderr
    after = await Scheduler(db).get(task.task_id)
    assert after is not None and after.cancel_requested_at is not None
    missing = _keel("tasks", "show", "t_nope", db_url=db_url, cwd=tmp_path)
    assert missing.returncode == 1
    db.close()


def test_config_check_exits_2_naming_the_key_when_config_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "app.yaml"
    bad.write_text("github:\n  webhok_secret: x\n")
    result = _keel("config", "check", str(bad), db_url="sqlite://", cwd=tmp_path)
    assert result.returncode == 2
    assert "github.webhok_secret" in result.stderr


def test_config_check_exits_2_naming_a_misspelt_key_when_its_variable_is_unset(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "app.yaml"
    bad.write_text("slack:\n  signing_secert: ${SLACK_SIGNING_SECRET}\n")
    result = _keel("config", "check", str(bad), db_url="sqlite://", cwd=tmp_path)
    assert result.returncode == 2
    assert "slack.signing_secert: unknown key (from SLACK_SIGNING_SECRET)" in result.stderr


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
    assert "warning: nothing can receive work" in result.stderr


def test_config_check_does_not_warn_when_a_surface_is_enabled(tmp_path: Path) -> None:
    config = tmp_path / "app.yaml"
    config.write_text("slack:\n  bot_token: xoxb-1\n  signing_secret: s\n")
    result = _keel("config", "check", str(config), db_url=None, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "slack: enabled" in result.stdout
    assert "warning" not in result.stderr


def test_serve_warns_on_stderr_when_no_surface_is_enabled(tmp_path: Path) -> None:
    args = ["serve", "--port", "0"]
    db_url = f"sqlite:///{tmp_path / 'keel.db'}"
    with subprocess.Popen(
        [*KEEL, *args], env=_env(db_url), cwd=tmp_path, stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL, text=True,
    ) as server:
        try:
            assert server.stderr is not None
            seen = [server.stderr.readline() for _ in range(3)]
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert any("warning: nothing can receive work" in line for line in seen), seen


def test_tasks_ls_exits_2_naming_the_path_and_creates_nothing_when_database_is_missing(
    tmp_path: Path,
) -> None:
    result = _keel("tasks", "ls", db_url=None, cwd=tmp_path)
    assert result.returncode == 2
    assert f"no database file at {tmp_path.resolve() / 'keel.db'}" in result.stderr
    assert "sqlite:///./keel.db" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_tasks_ls_exits_2_when_the_database_has_no_schema(tmp_path: Path) -> None:
    empty = tmp_path / "keel.db"
    sqlite3.connect(empty).close()
    result = _keel("tasks", "ls", db_url=f"sqlite:///{empty}", cwd=tmp_path)
    assert result.returncode == 2
    assert "has no current Keel schema (run keel db upgrade)" in result.stderr
    assert "Traceback" not in result.stderr


def test_db_upgrade_migrates_the_config_database_when_config_is_given(tmp_path: Path) -> None:
    target = tmp_path / "data" / "chosen.db"
    target.parent.mkdir()
    config = tmp_path / "app.yaml"
    config.write_text(f"database:\n  url: sqlite:///{target}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _keel("db", "upgrade", "--config", str(config), db_url=None, cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "database schema is current" in result.stdout
    assert target.exists() and list(elsewhere.iterdir()) == []
    listed = _keel("tasks", "ls", "--config", str(config), db_url=None, cwd=elsewhere)
    assert listed.returncode == 0 and "(no tasks)" in listed.stdout


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (TaskStatus.succeeded, 0),
        (TaskStatus.failed, 1),
        (TaskStatus.canceled, 3),
        (TaskStatus.timed_out, 4),
    ],
)
async def test_tasks_tail_exit_code_says_how_it_ended_when_task_is_terminal(
    db_url: str, tmp_path: Path, status: TaskStatus, code: int
) -> None:
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task = (await scheduler.transact(scheduler.schedule, make_spec(message="fix it"))).task
    await scheduler.transact(scheduler.report_result, task.task_id, TaskResult(status, "ended"))
    with db.engine.begin() as conn:  # as the executor leaves it once the outcome is reported
        conn.execute(text("UPDATE executions SET phase = 'done' WHERE task_id = :t"),
                     {"t": task.task_id})
    db.close()
    result = _keel("tasks", "tail", task.task_id, db_url=db_url, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert status.value in result.stdout
    assert _keel("tasks", "tail", "t_nope", db_url=db_url, cwd=tmp_path).returncode == 5


def test_tasks_tail_help_documents_its_exit_codes(tmp_path: Path) -> None:
    result = _keel("tasks", "tail", "--help", db_url=None, cwd=tmp_path)
    assert "1 failed, 3 canceled, 4 timed_out" in " ".join(result.stdout.split())


def test_config_check_exits_non_zero_naming_the_variable_when_the_app_key_is_invalid(
    tmp_path: Path,
) -> None:
    config = tmp_path / "app.yaml"
    config.write_text(
        "github:\n  webhook_secret: w\n  app:\n    app_id: 1\n"
        "    private_key: ${GITHUB_APP_PRIVATE_KEY}\n    installation_id: 2\n"
    )
    env = {**_env(None), "GITHUB_APP_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\\nx\\n"}
    result = subprocess.run(
        [*KEEL, "config", "check", str(config)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "GITHUB_APP_PRIVATE_KEY" in result.stderr
    assert "github.app.private_key" in result.stderr


def test_config_check_online_exchanges_the_app_key_for_a_token_and_runs_auth_test(
    tmp_path: Path,
) -> None:
    private, public = app_key_pair()
    wrong, _ = app_key_pair()
    github = GitHubState(app_public_key=public)
    slack = SlackState()
    slack.tokens.add("xoxb-online")
    with serve(create_github_app(github)) as gh, serve(create_slack_app(slack)) as sl:
        config = tmp_path / "app.yaml"
        config.write_text(
            f"slack:\n  bot_token: xoxb-online\n  signing_secret: s\n  api_url: {sl.url}/api/\n"
            f"github:\n  webhook_secret: w\n  api_url: {gh.url}\n  app:\n"
            f"    app_id: {github.app_id}\n    private_key: ${{GITHUB_APP_PRIVATE_KEY}}\n"
            "model:\n  provider: scripted\n"  # a scripted model has nothing to ask online
        )

        def check(key: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*KEEL, "config", "check", "--online", str(config)],
                env={**_env(None), "GITHUB_APP_PRIVATE_KEY": key},
                cwd=tmp_path, capture_output=True, text=True, timeout=60,
            )

        good, bad = check(private), check(wrong)

    assert good.returncode == 0, good.stderr
    assert f"issued a token for installation {github.installation_id}" in good.stdout
    assert "slack: auth.test ok" in good.stdout
    assert any(t.installation_id == github.installation_id for t in github.tokens.values())
    assert bad.returncode == 1
    assert "github: refused (401)" in bad.stderr and "GITHUB_APP_PRIVATE_KEY" in bad.stderr
    assert "BEGIN" not in bad.stderr + bad.stdout


async def test_cache_ls_lists_entries_and_clear_removes_one_repositorys(tmp_path: Path) -> None:
    ws, home = tmp_path / "src", tmp_path / "home"
    (ws / ".venv").mkdir(parents=True)
    (ws / ".venv" / "lib.py").write_text("x = 1\n" * 1000)
    home.mkdir()
    cache = EnvCache(tmp_path / "cache")
    for key, repo in (("aaa111", "acme/api"), ("bbb222", "acme/web")):
        assert not isinstance(await cache.store(key, repo, ws, home, [".venv"]), str)
    config = tmp_path / "app.yaml"
    config.write_text(f"workspace:\n  root: {tmp_path / 'workspaces'}\n")
    listed = _keel("cache", "ls", "--config", str(config), db_url="sqlite://", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "aaa111  acme/api" in listed.stdout and "bbb222  acme/web" in listed.stdout
    assert "2 entries" in listed.stdout
    cleared = _keel(
        "cache", "clear", "--repo", "acme/api", "--config", str(config),
        db_url="sqlite://", cwd=tmp_path,
    )
    assert cleared.returncode == 0 and "removed 1 entries" in cleared.stdout
    assert [e.repo for e in cache.entries()] == ["acme/web"]
    assert not (tmp_path / "cache" / "aaa111").exists()
