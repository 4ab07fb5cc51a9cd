"""SIGKILL a real worker at every boundary of an approval (the park, each tick while parked,
the approve, the approved call's dispatch and settlement), restart it, and check the end:
the question is asked once, the approval is not lost, and the write happens once even though
the same approval is delivered twice and a second person approves again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.scheduler import Scheduler
from runtime.store import executions, outbox, tool_calls
from runtime.store.engine import Database
from runtime.store.records import TaskStatus
from tests.factories import text_part
from tests.recovery.restarts import points_reached, problems_at, sampled
from tests.recovery.single import run_task

SCRIPT = {
    "scripts": [
        {
            "turns": [
                {"tool_calls": [{"name": "create_thing", "args": {"title": "release"}}]},
                {"say": "released"},
                # The second person's "approve" may land after the answer (SQLite serialises
                # the test's appends with the worker's commits): it is then a follow-up, and
                # the model answers it once more.
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


async def run_approval(
    db_url: str, folder: Path, *, fault: str | None = None, trace: Path | None = None
) -> Outcome:
    """Run the task; approve once it is parked (twice, and again as someone else)."""
    approved: list[str] = []

    async def approve(scheduler: Scheduler, task_id: str, run: executions.Run, _: bool) -> None:
        if not approved and run.phase == "await_approval":
            for key in ("approve-1", "approve-1", "approve-2"):
                await scheduler.transact(
                    scheduler.append_mailbox, task_id, key, [text_part("approve")]
                )
            approved.append(task_id)

    task_id = await run_task(
        db_url, folder, SCRIPT, approval="create_thing", fault=fault, trace=trace, on_tick=approve
    )
    db = Database.from_url(db_url)
    final = await Scheduler(db).get(task_id)
    posts = await db.read(lambda s: outbox.posts_of_task(s, task_id))
    calls = await db.read(lambda s: tool_calls.all_calls(s, task_id))
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
    points = points_reached(trace)
    assert "commit:await_approval#1" in points and "dispatching:call_0_0#1" in points, points
    points = sampled(points)
    urls = [db_factory() for _ in points]

    async def one(index: int, point: str) -> list[str]:
        outcome = await run_approval(urls[index], tmp_path / f"kill{index}", fault=point)
        return _check(point, outcome)

    assert await problems_at(points, one, PARALLEL) == []
