"""Running a task under a worker process that a fault may SIGKILL: restart it without the
fault until the task's run is done (the kill-point tests' shared loop), and running a check
at every fault point a traced run reached.

``make test`` kills at a sample of the points: every kind of point once (``commit:call_model``,
``dispatching:call_N_N``…), the occurrence picked by a seed that changes from run to run, so
successive runs cover different instances. ``KEEL_SOAK=1`` (``make soak``) kills at every point;
``KEEL_SOAK_SEED`` replays a sample, whose seed a failing test prints.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from runtime.store import executions
from runtime.store.engine import Database
from runtime.store.executions import Run

ROOT = Path(__file__).resolve().parents[2]
SOAKING = bool(os.environ.get("KEEL_SOAK"))

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


def point_kind(point: str) -> str:
    """What a point is, without which occurrence or call: ``dispatching:call_1_0#2`` is
    ``dispatching:call_N_N``."""
    return re.sub(r"[0-9]+", "N", point.partition("#")[0])


def sampled(points: Sequence[str]) -> list[str]:
    """Every point under KEEL_SOAK; otherwise one point of each kind, in the order reached."""
    if SOAKING:
        return list(points)
    seed = int(os.environ.get("KEEL_SOAK_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    kinds: dict[str, list[str]] = {}
    for point in points:
        kinds.setdefault(point_kind(point), []).append(point)
    chosen = {rng.choice(of_kind) for of_kind in kinds.values()}
    # Captured output, shown when the test fails: how to replay this sample.
    print(f"{len(chosen)} of {len(points)} kill points, KEEL_SOAK_SEED={seed}")
    return [p for p in points if p in chosen]


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
