"""The CLI as a person installing Keel meets it: the demo's prerequisites, ``--config``,
``keel tasks`` output for people (Rich tables, a growing transcript) and for scripts (--json).

Each test runs the real ``keel`` in a subprocess against a real database."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from runtime.store.records import TaskResult, TaskStatus
from runtime.store.transcripts import add_transcript_item
from tests.harness import schedule_task

ROOT = Path(__file__).resolve().parents[2]
KEEL = [sys.executable, "-c", "from adapters.cli import main; main()"]


def keel_env(db_url: str | None = None, path: str | None = None) -> dict[str, str]:
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
    return env


def keel(
    *args: str, cwd: Path, db_url: str | None = None, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KEEL, *args], env=keel_env(db_url, path), cwd=cwd, capture_output=True, text=True,
        timeout=60,
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


async def test_tasks_ls_is_a_table_and_json_for_scripts(db_url: str, tmp_path: Path) -> None:
    empty = keel("tasks", "ls", cwd=tmp_path, db_url=db_url)
    assert empty.returncode == 0 and empty.stdout.strip() == "(no tasks)"
    assert json.loads(keel("tasks", "ls", "--json", cwd=tmp_path, db_url=db_url).stdout) == {
        "tasks": [], "next_before": None
    }
    db = Database.from_url(db_url)
    first = await schedule_task(db, message="fix the flaky test\nsecond line")
    second = await schedule_task(db, message="x" * 200)
    db.close()
    listed = keel("tasks", "ls", cwd=tmp_path, db_url=db_url)
    assert listed.returncode == 0, listed.stderr
    header, rule, *rows = listed.stdout.splitlines()
    assert header.split() == ["TASK", "STATUS", "CREATED", "MESSAGE"]
    assert set(rule.strip()) <= {"─", " "}
    # One row each, newest first, columns aligned by Rich: each status starts where its
    # header does, whatever the length of what comes before.
    assert [row.split()[0] for row in rows] == [second.task_id, first.task_id]
    assert {row.index("queued") for row in rows} == {header.index("STATUS")}
    assert "fix the flaky test" in rows[1] and "second line" not in listed.stdout
    scripted = json.loads(keel("tasks", "ls", "--json", cwd=tmp_path, db_url=db_url).stdout)
    assert [t["task_id"] for t in scripted["tasks"]] == [second.task_id, first.task_id]
    assert scripted["tasks"][1]["message"] == "fix the flaky test\nsecond line"
    assert scripted["tasks"][1]["status"] == "queued"


async def test_tasks_show_and_cancel_speak_json(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url)
    task = await schedule_task(db, message="fix it")
    db.close()
    shown = keel("tasks", "show", task.task_id, "--json", cwd=tmp_path, db_url=db_url)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    # The fields GET /api/tasks/{id} answers with.
    assert detail["task"]["task_id"] == task.task_id and detail["task"]["message"] == "fix it"
    assert {"tree", "timeline", "transcript", "tool_calls", "evidence", "outbox"} <= set(detail)
    assert detail["usage"]["calls"] == 0 and detail["model_calls"] == []
    canceled = keel("tasks", "cancel", task.task_id, "--json", cwd=tmp_path, db_url=db_url)
    assert canceled.returncode == 0, canceled.stderr
    assert json.loads(canceled.stdout)["stop_recorded"] is True
    missing = keel("tasks", "show", "t_nope", "--json", cwd=tmp_path, db_url=db_url)
    assert missing.returncode == 1 and missing.stdout == ""


class Lines:
    """A running process's stdout, read line by line with a deadline (from the raw pipe:
    a buffered reader would hold lines that select no longer sees)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.seen: list[str] = []
        self.partial = b""

    def until(self, needle: str, timeout: float = 20) -> list[str]:
        deadline = time.monotonic() + timeout
        while not any(needle in line for line in self.seen):
            left = deadline - time.monotonic()
            assert left > 0 and self.selector.select(left), f"no {needle!r} in {self.seen}"
            chunk = os.read(self.fd, 65536)
            assert chunk, f"stdout closed without {needle!r}: {self.seen}"
            *complete, self.partial = (self.partial + chunk).split(b"\n")
            self.seen += [line.decode() for line in complete]
        return self.seen


async def _say(
    db: Database, task_id: str, key: str, role: str, kind: str, **payload: object
) -> None:
    now = datetime.now(UTC)
    await db.run(lambda s: add_transcript_item(s, task_id, key, role, kind, dict(payload), now))


async def test_tasks_tail_prints_the_transcript_as_it_grows(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url)
    task = await schedule_task(db, message="fix it")
    await _say(db, task.task_id, "model:0:0", "assistant", "message", text="Reading calc.py.")
    tail = subprocess.Popen(
        [*KEEL, "tasks", "tail", task.task_id], env=keel_env(db_url), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        lines = Lines(tail)
        lines.until("keel: Reading calc.py.")
        assert "run_command" not in "\n".join(lines.seen)  # not said yet
        args = {"command": "python -m unittest -v"}
        await _say(db, task.task_id, "call:c1", "assistant", "tool_call", name="run_command",
                   arguments=args)
        output = "$ python -m unittest -v\nexit code 1\n" + "\n".join(f"l{n}" for n in range(20))
        await _say(db, task.task_id, "result:c1", "tool", "tool_result", output=output,
                   outcome="ok")
        lines.until('→ run_command: {"command": "python -m unittest -v"}')
        lines.until("← ok: $ python -m unittest -v")
        lines.until("… 16 more lines")  # a long output is cut to its first lines
        scheduler = Scheduler(db)
        done = TaskResult(TaskStatus.succeeded, "fixed")
        await scheduler.transact(scheduler.report_result, task.task_id, done)
        with db.engine.begin() as conn:  # as the executor leaves it once reported
            conn.execute(text("UPDATE executions SET phase = 'done' WHERE task_id = :t"),
                         {"t": task.task_id})
        assert tail.wait(timeout=20) == 0
    finally:
        tail.kill()
        tail.wait()
        db.close()
    said = [line for line in lines.seen if "Reading calc.py." in line]
    assert len(said) == 1  # each item once, however many times the loop went round


async def test_tasks_tail_json_is_one_object_per_line(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task = await schedule_task(db, message="fix it")
    await _say(db, task.task_id, "model:0:0", "assistant", "message", text="On it.")
    await scheduler.transact(
        scheduler.report_result, task.task_id, TaskResult(TaskStatus.failed, "no")
    )
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE executions SET phase = 'done' WHERE task_id = :t"),
                     {"t": task.task_id})
    db.close()
    result = keel("tasks", "tail", task.task_id, "--json", cwd=tmp_path, db_url=db_url)
    assert result.returncode == 1, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in events] == ["status", "transcript", "end"]
    assert events[0]["status"] == "failed"
    assert events[1]["payload"] == {"text": "On it."} and events[1]["kind"] == "message"
    assert events[2] == {"event": "end", "status": "failed", "exit_code": 1}


def test_demo_shows_names_not_ids_and_ends_saying_how_to_see_the_task(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    done = subprocess.run(
        [*KEEL, "demo", "--workdir", str(workdir)], env=keel_env(), cwd=tmp_path,
        capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    out = done.stdout
    thread = out[out.index("──── the Slack thread") :]
    assert "dana: @keel the checkout tests are failing on main" in thread
    assert "<@U" not in out  # no raw Slack mention anywhere, the progress lines included
    # The evidence names the interpreter, not where this host keeps it.
    assert "`python" in thread and f"{sys.prefix}/bin" not in thread
    # Nothing points at the demo's Keel, which is gone; the way to see the task is given.
    assert "/ui/tasks/" not in out.replace("http://127.0.0.1:8080/ui/tasks/", "")
    assert "while Keel runs" not in out
    show_line = next(line for line in out.splitlines() if "keel tasks show" in line)
    argv = show_line.split("keel ", 1)[1].split()
    assert argv[-2:] == ["--config", str(workdir / "app.yaml")]
    shown = subprocess.run(
        [*KEEL, *argv], env=keel_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "succeeded" in shown.stdout.splitlines()[0]
    assert out.rstrip().endswith("✓ the reply landed in the thread with its evidence")
