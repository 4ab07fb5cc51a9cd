"""Running a task under a worker process that a fault may SIGKILL: restart it without the
fault until the task's run is done (the kill-point tests' shared loop), and running a check
at every fault point a traced run reached."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from runtime.store import executions
from runtime.store.engine import Database
from runtime.store.executions import Run

ROOT = Path(__file__).resolve().parents[2]

OnPoll = Callable[[Run | None], Awaitable[None]]


def spawn(
    module: str, args: Sequence[str], folder: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``python -m module args…`` with ``env`` over the environment less any KEEL_FAULT."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_FAULT")}
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**base, **env},
        stdout=subprocess.DEVNULL,
        stderr=(folder / "worker.err").open("ab"),
    )


async def until_done(
    db: Database,
    task_id: str,
    start: Callable[[dict[str, str]], subprocess.Popen[bytes]],
    env: dict[str, str],
    on_poll: OnPoll | None = None,
    *,
    folder: Path,
    timeout: float = 90,
) -> bool:
    """Run the task's worker until its run is done; True if a worker was killed on the way."""
    worker, killed = start(env), False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                killed = True
                worker = start({})
            run = await db.read(lambda s: executions.load_run(s, task_id))
            if run is not None and run.phase == "done":
                return killed
            if on_poll is not None:
                await on_poll(run)
            await asyncio.sleep(0.05)
        raise TimeoutError((folder / "worker.err").read_text()[-2000:])
    finally:
        (folder / "stop").write_text("")
        worker.wait(timeout=15)


def points_reached(trace: Path) -> list[str]:
    """The fault points a run with KEEL_FAULT_TRACE passed, each once, in the order reached."""
    return list(dict.fromkeys(trace.read_text().split()))


async def problems_at(
    points: Sequence[str], check: Callable[[int, str], Awaitable[list[str]]], parallel: int
) -> list[str]:
    """Every problem ``check`` (given each point and its index) finds, ``parallel`` at once."""
    gate = asyncio.Semaphore(parallel)

    async def one(index: int, point: str) -> list[str]:
        async with gate:
            return await check(index, point)

    results = await asyncio.gather(*(one(i, p) for i, p in enumerate(points)))
    return [p for r in results for p in r]
