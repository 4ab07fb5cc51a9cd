"""SIGKILL a real worker at every boundary of an approval (the park, each tick while parked,
the approve, the approved call's dispatch and settlement), restart it, and check the end:
the question is asked once, the approval is not lost, and the write happens once even though
the same approval is delivered twice and a second person approves again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.scheduler import Scheduler
from runtime.store import outbox, runs
from runtime.store.engine import Database
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part

SCRIPT = {
    "scripts": [
        {
            "turns": [
                {"tool_calls": [{"name": "create_thing", "args": {"title": "release"}}]},
                {"say": "released"},
            ]
        }
    ]
}
PARALLEL = 2


@dataclass
class Outcome:
    status: TaskStatus
    effects: int
    asks: int
    interrupted: bool  # a kill between dispatching and the effect: honest, not repeated


def _spawn(
    db_url: str, folder: Path, fault: str | None, trace: Path | None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_FAULT")}
    if fault:
        env["KEEL_FAULT"] = fault
    if trace:
        env["KEEL_FAULT_TRACE"] = str(trace)
    script = folder / "script.json"
    script.write_text(json.dumps(SCRIPT))
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "tests.recovery.worker_main", db_url, str(folder)]
    return subprocess.Popen(
        [*command, str(script), "create_thing"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(folder / "worker.err").open("ab"),
    )


async def run_approval(
    db_url: str, folder: Path, *, fault: str | None = None, trace: Path | None = None
) -> Outcome:
    """Run the task; approve once it is parked (twice, and again as someone else)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task = (await scheduler.schedule(make_spec())).task
    worker = _spawn(db_url, folder, fault, trace)
    approved = False
    deadline = time.monotonic() + 120
    try:
        while True:
            assert time.monotonic() < deadline, (folder / "worker.err").read_text()[-2000:]
            run = await db.run(lambda s: runs.load_run(s, task.task_id))
            if not approved and run is not None and run.phase == "await_approval":
                for key in ("approve-1", "approve-1", "approve-2"):
                    await scheduler.append_mailbox(task.task_id, key, [text_part("approve")])
                approved = True
            if worker.poll() is not None:  # killed at the fault point: start again, no fault
                worker = _spawn(db_url, folder, None, None)
            if run is not None and run.phase == "done":
                break
            await asyncio.sleep(0.05)
    finally:
        (folder / "stop").write_text("")
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.send_signal(signal.SIGKILL)
        (folder / "stop").unlink()
    final = await scheduler.get(task.task_id)
    posts = await db.read(lambda s: outbox.posts_of_task(s, task.task_id))
    calls = await db.read(lambda s: runs.all_calls(s, task.task_id))
    db.close()
    effects = folder / "effects.log"
    assert final is not None
    return Outcome(
        status=final.status,
        effects=len(effects.read_text().splitlines()) if effects.exists() else 0,
        asks=len([p for p in posts if p.purpose == "approval"]),
        interrupted=any(c.outcome == "interrupted" for c in calls),
    )


def _check(point: str, outcome: Outcome) -> list[str]:
    happened = Outcome(TaskStatus.succeeded, 1, 1, False)
    # Killed after marking the call dispatching but before its effect: reported interrupted.
    honest = Outcome(TaskStatus.succeeded, 0, 1, True)
    return [] if outcome in (happened, honest) else [f"{point}: {outcome}"]


async def test_approval_survives_a_kill_at_every_boundary_and_the_write_happens_once(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    baseline = await run_approval(db_factory(), tmp_path / "baseline", trace=trace)
    assert _check("baseline", baseline) == []
    points = list(dict.fromkeys(trace.read_text().split()))
    assert "commit:await_approval#1" in points and "dispatching:call_0_0#1" in points, points
    urls = [db_factory() for _ in points]
    gate = asyncio.Semaphore(PARALLEL)

    async def one(index: int, point: str) -> list[str]:
        async with gate:
            outcome = await run_approval(urls[index], tmp_path / f"kill{index}", fault=point)
            return _check(point, outcome)

    results = await asyncio.gather(*(one(i, p) for i, p in enumerate(points)))
    assert [p for r in results for p in r] == []
