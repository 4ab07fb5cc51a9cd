"""One scripted task run by a real worker process that a fault may SIGKILL; the worker is
started again (without the fault) until the task is done. ``on_tick`` sees the run at every
look, to answer the task (an approval, say) once it is where the test wants it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from runtime.scheduler import Scheduler
from runtime.store import executions
from runtime.store.engine import Database
from tests.factories import make_spec

OnTick = Callable[[Scheduler, str, executions.Run], Awaitable[None]]


def _spawn(
    db_url: str, folder: Path, approval: str, fault: str | None, trace: Path | None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_FAULT")}
    if fault:
        env["KEEL_FAULT"] = fault
    if trace:
        env["KEEL_FAULT_TRACE"] = str(trace)
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "tests.recovery.worker_main", db_url, str(folder)]
    return subprocess.Popen(
        [*command, str(folder / "script.json"), approval],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(folder / "worker.err").open("ab"),
    )


async def run_task(
    db_url: str,
    folder: Path,
    script: dict[str, Any],
    *,
    approval: str = "",
    fault: str | None = None,
    trace: Path | None = None,
    on_tick: OnTick | None = None,
    timeout: float = 120,
) -> str:
    """Run one task to its end through kills; its id."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.json").write_text(json.dumps(script))
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task_id = (await scheduler.schedule(make_spec())).task.task_id
    worker = _spawn(db_url, folder, approval, fault, trace)
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, (folder / "worker.err").read_text()[-2000:]
            run = await db.run(lambda s: executions.load_run(s, task_id))
            if run is not None and on_tick is not None:
                await on_tick(scheduler, task_id, run)
            if worker.poll() is not None:  # killed at the fault point: start again, no fault
                worker = _spawn(db_url, folder, approval, None, None)
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
