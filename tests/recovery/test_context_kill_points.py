"""SIGKILL a worker at every model-call boundary of a task whose transcript outgrows a
small window, restart it, and compare with an uninterrupted run.

The requests the model receives are a function of the persisted transcript: after any kill,
every request for a turn (or a compaction) is the one the uninterrupted run sent, the
summaries stored are the same (one per need: a compaction killed before its commit is asked
again, never stored twice), and the mailbox message is in the transcript once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.scheduler import Scheduler
from runtime.store import transcripts
from runtime.store.engine import Database
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part
from tests.recovery.restarts import points_reached, problems_at, sampled, spawn, until_done

PARALLEL = 2
FOLLOW_UP = "and keep the changelog"


@dataclass(frozen=True, slots=True)
class Observed:
    status: TaskStatus
    requests: dict[tuple[str, int], set[str]]
    summaries: list[int]  # the turn of each stored summary
    mailbox_items: int
    killed: bool


async def _run(db_url: str, folder: Path, env: dict[str, str]) -> Observed:
    folder.mkdir(parents=True, exist_ok=True)
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task = (await scheduler.transact(scheduler.schedule, make_spec(message="read every part"))).task
    await scheduler.transact(
        scheduler.append_mailbox, task.task_id, "followup-1", [text_part(FOLLOW_UP)], "U1"
    )
    args = (db_url, str(folder), task.task_id)
    killed = await until_done(
        db,
        task.task_id,
        lambda extra: spawn("tests.recovery.context_main", args, folder, extra),
        env,
        folder=folder,
    )
    final = await scheduler.get(task.task_id)
    entries = await db.read(lambda s: transcripts.transcript(s, task.task_id))
    db.close()
    assert final is not None
    requests: dict[tuple[str, int], set[str]] = {}
    for line in (folder / "requests.log").read_text().splitlines():
        purpose, turn, digest = line.split()
        requests.setdefault((purpose, int(turn)), set()).add(digest)
    return Observed(
        final.status,
        requests,
        [int(e.payload["turn"]) for e in entries if e.kind == "summary"],
        sum(1 for e in entries if e.kind == "mailbox" and FOLLOW_UP in e.payload["text"]),
        killed,
    )


def _problems(point: str, baseline: Observed, outcome: Observed) -> list[str]:
    problems = []
    if not outcome.killed:
        problems.append("never reached")
    if outcome.status is not TaskStatus.succeeded:
        problems.append(f"status {outcome.status}")
    if outcome.requests != baseline.requests:
        changed = sorted(
            k for k in outcome.requests if outcome.requests[k] != baseline.requests.get(k)
        )
        problems.append(f"requests differ for {changed}")
    if outcome.summaries != baseline.summaries:
        problems.append(f"summaries {outcome.summaries}, expected {baseline.summaries}")
    if outcome.mailbox_items != 1:
        problems.append(f"{outcome.mailbox_items} mailbox items")
    return [f"{point}: {p}" for p in problems]


async def test_same_requests_and_one_compaction_per_need_when_killed_at_each_model_boundary(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    baseline = await _run(db_factory(), tmp_path / "baseline", {"KEEL_FAULT_TRACE": str(trace)})
    assert baseline.status is TaskStatus.succeeded
    assert baseline.summaries, "the scenario never compacted"
    assert baseline.mailbox_items == 1
    assert all(len(d) == 1 for d in baseline.requests.values()), baseline.requests
    reached = points_reached(trace)
    points = [p for p in reached if "call_model" in p or "compaction" in p]
    assert any(p.startswith("compaction:summarised") for p in points)
    points = sampled(points)

    async def one(index: int, point: str) -> list[str]:
        env = {"KEEL_FAULT": point}
        outcome = await _run(db_factory(), tmp_path / f"kill{index}", env)
        return _problems(point, baseline, outcome)

    assert await problems_at(points, one, PARALLEL) == []
