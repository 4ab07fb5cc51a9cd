"""A stop ends a running command: its whole process tree dies within seconds, sandboxed or not.

Driven through Keel's public surfaces (a signed Slack "stop" in the thread) with a real
`sleep` under a real wrapper, and through a real `keel worker` killed between seeing the stop
and killing the command: the worker that recovers the run still kills it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.demo.repo import create_sample_repo
from runtime.scheduler import Scheduler
from runtime.store import tasks as q
from runtime.store import tool_calls
from runtime.store.engine import Database
from runtime.store.outbox import posts_of_task
from runtime.store.records import Task, TaskStatus
from runtime.tools.base import Completed, Started, Stopped, ToolContext
from runtime.tools.devbox import RunCommand
from runtime.workspace.commands import CommandRun, execution_id, wrapper_script
from runtime.workspace.sandbox import Sandbox
from tests.factories import make_spec
from tests.host import require_bwrap
from tests.integration.keel_live import CHANNEL, PERSON, live_keel

ROOT = Path(__file__).resolve().parents[2]
STOP_BOUND_S = 5.0  # the promise: a stopped command is dead within this long


def _usable(mode: str) -> str:
    if mode == "bwrap":
        require_bwrap()
    return mode


@pytest.fixture(params=["bwrap", "none"])
def sandbox_mode(request: pytest.FixtureRequest) -> str:
    return _usable(str(request.param))


def _script(command: str) -> dict[str, Any]:
    call = {"name": "run_command", "args": {"command": command, "timeout_s": 600}}
    return {"scripts": [{"turns": [{"tool_calls": [call]}, {"say": "the command finished"}]}]}


def _long_sleep() -> tuple[str, str]:
    """A `sleep` no other process on the machine runs, with a second one in the background,
    so the kill must reach the whole group and not just the shell's foreground child."""
    seconds = f"{40 + uuid.uuid4().int % 10_000 / 10_000:.4f}"
    return seconds, f"sleep {seconds} & sleep {seconds}; echo ran >> ../ran.log"


def _sleepers(seconds: str) -> list[int]:
    """Live (not zombie) processes running ``sleep <seconds>``, by host pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argv[:2] == [b"sleep", seconds.encode()] and state != "Z":
            found.append(int(entry.name))
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def _until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Seconds until ``check`` holds; fails after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await check():
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout}s")


async def _only_call(db: Database, task_id: str) -> tool_calls.ToolCallRecord | None:
    calls = await db.read(lambda s: tool_calls.all_calls(s, task_id))
    return calls[0] if calls else None


def _wrapper_pid(workspaces: Path, handle: str) -> int:
    [pid_file] = workspaces.glob(f".keel-state/*/exec/{handle}/pid")
    return int(pid_file.read_text())


# -- through the Slack thread --------------------------------------------------------------


async def test_command_tree_killed_within_5s_when_thread_says_stop(
    db_url: str, tmp_path: Path, sandbox_mode: str
) -> None:
    seconds, command = _long_sleep()
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(_script(command)))
    extra = {
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {"sandbox": sandbox_mode},
    }
    db = Database.from_url(db_url)
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=extra) as live:
        mention = live.mention("please run the slow job")
        await live.send_slack(mention)
        objective = f"slack:{live.slack.team_id}/{CHANNEL}/{mention['ts']}"

        async def running() -> bool:
            task = await db.read(lambda s: q.latest_by_objective(s, objective))
            call = await _only_call(db, task.task_id) if task else None
            return bool(call and call.dispatch_state == "started" and len(_sleepers(seconds)) == 2)

        await _until(running, 30, "the command never started")
        task = await db.read(lambda s: q.latest_by_objective(s, objective))
        assert task is not None
        call = await _only_call(db, task.task_id)
        assert call is not None and call.handle is not None
        wrapper = _wrapper_pid(tmp_path / "keel" / "workspaces", call.handle)
        assert _group_alive(wrapper)

        stop_sent = time.monotonic()
        await live.send_slack(live.reply(mention["ts"], "stop"))

        async def dead() -> bool:
            return not _sleepers(seconds) and not _group_alive(wrapper)

        await _until(dead, 15, "the command outlived the stop")
        latency = time.monotonic() - stop_sent
        assert latency < STOP_BOUND_S, f"killed {latency:.1f}s after the stop"

        async def reported() -> bool:
            posts = await db.read(lambda s: posts_of_task(s, task.task_id))
            return any(p.purpose == "completion" and p.state == "landed" for p in posts)

        await _until(reported, 20, "the stop was never reported")
        await asyncio.sleep(0.5)  # a last progress edit may still be in flight
        replies = [m.text for m in live.slack.thread(CHANNEL, mention["ts"]) if m.bot_id]

    final = await Scheduler(db).get(task.task_id)
    settled = await _only_call(db, task.task_id)
    db.close()
    assert final is not None and final.status is TaskStatus.canceled
    assert settled is not None and settled.outcome == "canceled"
    output = (settled.result or {})["output"]
    assert "stopped after" in output and "process group was killed" in output
    assert f"(stop from {PERSON})" in output  # who stopped it, as the routing recorded
    stopped = [text for text in replies if "Stopped" in text]
    assert len(stopped) == 1, replies  # the thread is told once
    assert "ended while running: run_command" in stopped[0]
    assert not list((tmp_path / "keel" / "workspaces").glob("*/ran.log"))  # it never finished


# -- a worker killed between the stop and the kill ------------------------------------------


def _config(tmp_path: Path, db_url: str, sandbox_mode: str, command: str) -> Path:
    bare = create_sample_repo(tmp_path / "origin")
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(_script(command)))
    config = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {
            "root": str(tmp_path / "ws"),
            "sandbox": sandbox_mode,
            "repositories": {"shop": {"url": bare.as_uri()}},
        },
        "worker": {"concurrency": 1, "poll_interval_s": 0.1, "lease_seconds": 2},
    }
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _scheduled(
    tmp_path: Path, db_url: str, sandbox_mode: str, command: str
) -> tuple[Path, Database, Scheduler, Task]:
    """A `keel worker` configuration, and a task (not yet running) whose model runs ``command``."""
    config_path = _config(tmp_path, db_url, sandbox_mode, command)
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task = (
        await scheduler.transact(scheduler.schedule, make_spec(repo="shop", message="run the job"))
    ).task
    return config_path, db, scheduler, task


def _worker(config_path: Path, fault: str | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    if fault is not None:
        env["KEEL_FAULT"] = fault
    argv = [sys.executable, "-c", "from adapters.cli import main; main()", "worker"]
    return subprocess.Popen(
        [*argv, "--config", str(config_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _ended(scheduler: Scheduler, task_id: str, timeout: float = 30) -> None:
    async def terminal() -> bool:
        current = await scheduler.get(task_id)
        return current is not None and current.status.is_terminal

    await _until(terminal, timeout, "the task never ended")


async def _canceled_call(
    db: Database, scheduler: Scheduler, task_id: str
) -> tool_calls.ToolCallRecord:
    """The task's one call, once both it and the task are canceled; closes ``db``."""
    final = await scheduler.get(task_id)
    call = await _only_call(db, task_id)
    db.close()
    assert final is not None and final.status is TaskStatus.canceled
    assert call is not None and call.outcome == "canceled"
    return call


def _reap(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@pytest.mark.parametrize(
    ("point", "mode"),
    [("stopping", "bwrap"), ("stopping", "none"), ("stopped", "bwrap")],
    ids=["before-kill-bwrap", "before-kill-none", "after-kill-before-settle-bwrap"],
)
async def test_command_killed_on_recovery_when_worker_dies_between_stop_and_kill(
    db_url: str, tmp_path: Path, point: str, mode: str
) -> None:
    seconds, command = _long_sleep()
    config_path, db, scheduler, task = await _scheduled(tmp_path, db_url, _usable(mode), command)
    worker = _worker(config_path, fault=f"{point}:call_0_0")
    try:

        async def running() -> bool:
            call = await _only_call(db, task.task_id)
            return bool(call and call.dispatch_state == "started" and len(_sleepers(seconds)) == 2)

        await _until(running, 30, "the command never started")
        assert await scheduler.transact(
            scheduler.request_cancel, task.task_id, "stop from dana", "U0DANA"
        )
        code = await asyncio.to_thread(worker.wait, 20)
        assert code == -signal.SIGKILL  # died at the fault point
        if point == "stopping":
            assert len(_sleepers(seconds)) == 2  # the stop was seen; the kill never happened
        worker = _worker(config_path)

        async def dead() -> bool:
            return not _sleepers(seconds)

        await _until(dead, 20, "the recovering worker did not kill the command")
        await _ended(scheduler, task.task_id)
    finally:
        _reap(worker)
    call = await _canceled_call(db, scheduler, task.task_id)
    output = (call.result or {})["output"]
    assert "stopped after" in output and "(stop from dana)" in output
    assert not list((tmp_path / "ws").glob("*/ran.log"))


async def test_command_never_starts_when_recovered_after_stop_without_a_handle(
    db_url: str, tmp_path: Path
) -> None:
    """The worker died after marking the call dispatching and before launching it; a stop came
    meanwhile. The recovering worker must not start the command only to kill it: it never runs.
    """
    seconds, command = _long_sleep()
    config_path, db, scheduler, task = await _scheduled(tmp_path, db_url, "none", command)
    worker = _worker(config_path, fault="dispatching:call_0_0")
    try:
        assert await asyncio.to_thread(worker.wait, 30) == -signal.SIGKILL
        assert await scheduler.transact(
            scheduler.request_cancel, task.task_id, "stop from dana", "U0DANA"
        )
        worker = _worker(config_path)
        await _ended(scheduler, task.task_id)
    finally:
        _reap(worker)
    call = await _canceled_call(db, scheduler, task.task_id)
    assert call.handle is None
    assert "stopped before it started" in (call.result or {})["output"]
    assert not _sleepers(seconds)
    [folder] = (tmp_path / "ws").rglob(f"exec/{execution_id(task.task_id, 'call_0_0')}")
    assert not (folder / "pid").exists()  # no wrapper was ever launched


# -- the command tool on its own --------------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


async def test_later_start_runs_nothing_when_stopped_before_launch(ws: Path) -> None:
    tool, ctx = RunCommand(Sandbox(mode="none")), ToolContext("t", "r", "call-x", workspace=ws)
    stopped = await tool.cancel(None, ctx, "stop from dana")
    assert isinstance(stopped, Stopped) and "stopped before it started" in stopped.output
    started = await tool.start({"command": "echo ran > ran.txt"}, ctx)
    assert started == Started(handle=execution_id("t", "call-x"))
    await asyncio.sleep(0.5)
    polled = await tool.poll(started.handle, ctx)
    assert isinstance(polled, Completed) and polled.is_error and "it never ran" in polled.output
    assert not (ws / "ran.txt").exists()


async def test_same_call_id_in_two_tasks_runs_twice_when_workspace_shared(ws: Path) -> None:
    """A child shares its parent's workspace and scripted call ids repeat across tasks: the
    child's call must run its own command, not report the parent's execution."""
    tool = RunCommand(Sandbox(mode="none"))
    parent, child = (ToolContext(t, "r", "call_0_0", workspace=ws) for t in ("parent", "child"))
    outputs = []
    for ctx, word in ((parent, "from-parent"), (child, "from-child")):
        started = await tool.start({"command": f"echo {word}"}, ctx)
        assert isinstance(started, Started)
        for _ in range(200):
            polled = await tool.poll(started.handle, ctx)
            if isinstance(polled, Completed):
                outputs.append(polled.output)
                break
            await asyncio.sleep(0.05)
    assert len(outputs) == 2
    assert "from-parent" in outputs[0] and "from-child" in outputs[1]
    assert "from-parent" not in outputs[1].split("\n", 1)[1]


async def test_wrapper_runs_nothing_when_stop_lands_before_its_pid(ws: Path) -> None:
    """The launch race: the stop's verdict is out before the wrapper publishes its pid, so the
    stop saw no pid to kill; the wrapper must then see the verdict and not run the command."""
    run = CommandRun(ws, execution_id("t", "call-race"))
    run.folder.mkdir(parents=True)
    tool, ctx = RunCommand(), ToolContext("t", "r", "call-race", workspace=ws)
    assert isinstance(await tool.cancel(run.exec_id, ctx, "stop"), Stopped)
    script = run.folder / "run.sh"
    script.write_text(wrapper_script(run.folder, ["bash", "-c", f"echo ran > {ws}/ran.txt"]))
    done = subprocess.run(["bash", str(script)], cwd=ws, timeout=10, check=False)
    assert done.returncode == 0 and (run.folder / "pid").exists()
    assert not (ws / "ran.txt").exists()


async def test_real_result_stands_when_command_ended_before_the_stop(ws: Path) -> None:
    tool, ctx = RunCommand(Sandbox(mode="none")), ToolContext("t", "r", "call-y", workspace=ws)
    started = await tool.start({"command": "echo fine; exit 4"}, ctx)
    assert isinstance(started, Started)
    exit_file = CommandRun(ws, started.handle).folder / "exit"
    deadline = time.monotonic() + 10
    while not exit_file.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    outcome = await tool.cancel(started.handle, ctx, "stop from dana")
    assert isinstance(outcome, Completed) and "exit code 4" in outcome.output
    assert "fine" in outcome.output
