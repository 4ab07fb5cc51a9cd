"""SIGKILL a worker at every boundary around a budget's question, restart it, and check that
the task asked once per budget, took each reply once, and ended on ``stop``."""

from __future__ import annotations

import asyncio
import os
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

ROOT = Path(__file__).resolve().parents[2]
PARALLEL = 2


@dataclass(frozen=True, slots=True)
class Observed:
    status: TaskStatus
    outcome: str
    asks: list[str]
    replies: list[str]
    killed: bool


def _spawn(db_url: str, folder: Path, env_extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_FAULT")}
    env.update(env_extra)
    command = [sys.executable, "-m", "tests.recovery.budget_main", db_url, str(folder)]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(folder / "worker.err").open("ab"),
    )


async def _run(db_url: str, folder: Path, env_extra: dict[str, str]) -> Observed:
    folder.mkdir(parents=True, exist_ok=True)
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task = (await scheduler.schedule(make_spec(message="spend"))).task
    worker, killed = _spawn(db_url, folder, env_extra), False
    replies = ["continue", "stop"]
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                killed = True
                worker = _spawn(db_url, folder, {})
            run = await db.read(lambda s: runs.load_run(s, task.task_id))
            if run is not None and run.phase == "done":
                break
            posts = await db.read(lambda s: outbox.posts_of_task(s, task.task_id))
            asked = sum(1 for p in posts if p.purpose == "budget")
            answered = 2 - len(replies)
            if replies and run is not None and run.phase == "await_budget" and asked > answered:
                text = replies.pop(0)
                await scheduler.append_mailbox(task.task_id, f"reply-{text}", [text_part(text)])
            await asyncio.sleep(0.05)
        else:
            raise TimeoutError((folder / "worker.err").read_text()[-2000:])
    finally:
        (folder / "stop").write_text("")
        worker.wait(timeout=15)
    final = await scheduler.get(task.task_id)
    entries = await db.read(lambda s: runs.transcript(s, task.task_id))
    posts = await db.read(lambda s: outbox.posts_of_task(s, task.task_id))
    db.close()
    assert final is not None and final.result is not None
    return Observed(
        final.status,
        str(final.result.get("outcome")),
        [p.key.rsplit(":", 1)[1] for p in posts if p.purpose == "budget"],
        [str(e.payload["text"]) for e in entries if e.kind == "mailbox"],
        killed,
    )


def _problems(point: str, seen: Observed) -> list[str]:
    problems = []
    if not seen.killed and point != "baseline":
        problems.append("never reached")
    if (seen.status, seen.outcome) != (TaskStatus.canceled, "budget_stopped"):
        problems.append(f"ended {seen.status} {seen.outcome}")
    if seen.asks != ["0", "1"]:
        problems.append(f"asked {seen.asks}")
    if [r.count("continue") for r in seen.replies] != [1, 0] or len(seen.replies) != 2:
        problems.append(f"replies {seen.replies}")
    return [f"{point}: {p}" for p in problems]


async def test_one_question_per_budget_and_each_reply_once_when_killed_around_the_question(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    baseline = await _run(db_factory(), tmp_path / "baseline", {"KEEL_FAULT_TRACE": str(trace)})
    assert _problems("baseline", baseline) == []
    reached = list(dict.fromkeys(trace.read_text().split()))
    # Every tick of the parked phase, and each commit that parks (the call_model commit just
    # before the parked phase's first tick); the other call_model commits are the context
    # test's.
    points = [p for p in reached if "await_budget" in p]
    for index, point in enumerate(reached):
        if point.startswith("commit:await_budget") and "call_model" in reached[index - 1]:
            points.append(reached[index - 1])
    assert len(points) >= 4, reached
    gate = asyncio.Semaphore(PARALLEL)

    async def one(index: int, point: str) -> list[str]:
        async with gate:
            seen = await _run(db_factory(), tmp_path / f"kill{index}", {"KEEL_FAULT": point})
            return _problems(point, seen)

    results = await asyncio.gather(*(one(i, p) for i, p in enumerate(points)))
    assert [p for r in results for p in r] == []
