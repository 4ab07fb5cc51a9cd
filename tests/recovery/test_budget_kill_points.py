"""SIGKILL a worker at every boundary around a budget's question, restart it, and check that
the task asked once per budget, took each reply once, and ended on ``stop``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.scheduler import Scheduler
from runtime.store import executions, outbox, transcripts
from runtime.store.engine import Database
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part
from tests.recovery.restarts import points_reached, problems_at, sampled, spawn, until_done

PARALLEL = 2


@dataclass(frozen=True, slots=True)
class Observed:
    status: TaskStatus
    outcome: str
    asks: list[str]
    replies: list[str]
    killed: bool


async def _run(db_url: str, folder: Path, env: dict[str, str]) -> Observed:
    folder.mkdir(parents=True, exist_ok=True)
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task = (await scheduler.transact(scheduler.schedule, make_spec(message="spend"))).task
    replies = ["continue", "stop"]

    async def answer(run: executions.Run | None) -> None:
        """Each question gets the next reply, once, while the task is parked at it."""
        if not replies or run is None or run.phase != "await_budget":
            return
        posts = await db.read(lambda s: outbox.posts_of_task(s, task.task_id))
        if sum(1 for p in posts if p.purpose == "budget") > 2 - len(replies):
            text = replies.pop(0)
            await scheduler.transact(
                scheduler.append_mailbox, task.task_id, f"reply-{text}", [text_part(text)]
            )

    killed = await until_done(
        db,
        task.task_id,
        lambda extra: spawn("tests.recovery.budget_main", (db_url, str(folder)), folder, extra),
        env,
        answer,
        folder=folder,
    )
    final = await scheduler.get(task.task_id)
    entries = await db.read(lambda s: transcripts.transcript(s, task.task_id))
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
    reached = points_reached(trace)
    # Every tick of the parked phase, and each commit that parks (the call_model commit just
    # before the parked phase's first tick); the other call_model commits are the context
    # test's.
    points = [p for p in reached if "await_budget" in p]
    for index, point in enumerate(reached):
        if point.startswith("commit:await_budget") and "call_model" in reached[index - 1]:
            points.append(reached[index - 1])
    assert len(points) >= 4, reached
    points = sampled(points)

    async def one(index: int, point: str) -> list[str]:
        seen = await _run(db_factory(), tmp_path / f"kill{index}", {"KEEL_FAULT": point})
        return _problems(point, seen)

    assert await problems_at(points, one, PARALLEL) == []
