"""One scripted task run by a real worker process that a fault may SIGKILL; the worker is
started again (without the fault) until the task is done. ``on_tick`` sees the run at every
look, to answer the task (an approval, say) once it is where the test wants it, or to write to
it once a kill has happened."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from runtime.scheduler import Scheduler
from runtime.store import executions
from runtime.store.engine import Database
from runtime.store.records import TaskSpec
from tests.factories import make_spec
from tests.recovery.restarts import spawn

# (scheduler, task id, the run as now stored, whether the worker has just died)
OnTick = Callable[[Scheduler, str, executions.Run, bool], Awaitable[None]]


def _spawn(
    db_url: str, folder: Path, approval: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    args = (db_url, str(folder), str(folder / "script.json"), approval)
    return spawn("tests.recovery.worker_main", args, folder, env)


async def run_task(
    db_url: str,
    folder: Path,
    script: dict[str, Any],
    *,
    spec: TaskSpec | None = None,
    approval: str = "",
    fault: str | None = None,
    trace: Path | None = None,
    on_tick: OnTick | None = None,
    timeout: float = 120,
) -> str:
    """Run one task (``spec``, or the factory's) to its end through kills; its id."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.json").write_text(json.dumps(script))
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task_id = (await scheduler.transact(scheduler.schedule, spec or make_spec())).task.task_id
    env = {"KEEL_FAULT": fault} if fault else {}
    if trace:
        env["KEEL_FAULT_TRACE"] = str(trace)
    worker = _spawn(db_url, folder, approval, env)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() >= deadline:
                log = (folder / "worker.err").read_text()[-2000:]
                raise TimeoutError(f"task did not finish; fault={fault}; worker log tail:\n{log}")
            run = await db.run(lambda s: executions.load_run(s, task_id))
            if run is not None and on_tick is not None:
                await on_tick(scheduler, task_id, run, worker.poll() is not None)
            if worker.poll() is not None:  # killed at the fault point: start again, no fault
                worker = _spawn(db_url, folder, approval, {})
            if run is not None and run.phase == "done":
                return task_id
            await asyncio.sleep(0.05)
    finally:
        (folder / "stop").write_text("")
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.send_signal(signal.SIGKILL)
        (folder / "stop").unlink()
        db.close()
