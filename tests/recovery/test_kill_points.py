"""SIGKILL a real worker at every persisted boundary of the scenario, restart, check the end.

For every kill point the task reaches the uninterrupted outcome (or an honest interrupted
write), each write's effect happens at most once, the child is created once, the mailbox
message appears once in the transcript, and tool results appear in call order.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runtime.store.records import TaskStatus
from tests.recovery.restarts import points_reached, problems_at, sampled
from tests.recovery.scenario import Outcome, run_scenario

PARALLEL = 2


def _check(point: str, outcome: Outcome) -> list[str]:
    problems = []
    if outcome.status is not TaskStatus.succeeded:
        problems.append(f"status {outcome.status}")
    if len(outcome.effects) > 1 or len(outcome.blind) > 1:
        problems.append(f"write repeated: {outcome.effects} {outcome.blind}")
    if not outcome.blind and "create_blind" not in outcome.interrupted:
        problems.append("blind write neither happened nor reported interrupted")
    if not outcome.effects and "create_thing" not in outcome.interrupted:
        problems.append("reconcilable write neither happened nor reported interrupted")
    if outcome.children != 1:
        problems.append(f"{outcome.children} children")
    if outcome.mailbox_items != 1 or outcome.mailbox_messages != 1:
        problems.append(
            f"mailbox items {outcome.mailbox_items}, messages {outcome.mailbox_messages}"
        )
    if not outcome.result_order_ok:
        problems.append("results out of call order")
    return [f"{point}: {p}" for p in problems]


async def test_task_recovers_correctly_when_worker_is_killed_at_every_boundary(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    baseline = await run_scenario(db_factory(), tmp_path / "baseline", trace=trace)
    assert _check("baseline", baseline) == []
    assert baseline.interrupted == []
    points = points_reached(trace)
    assert len(points) >= 40, points  # every commit, dispatch, start and settle of 5 turns + child
    points = sampled(points)
    urls = [db_factory() for _ in points]

    async def one(index: int, point: str) -> list[str]:
        outcome = await run_scenario(urls[index], tmp_path / f"kill{index}", fault=point)
        return _check(point, outcome)

    assert await problems_at(points, one, PARALLEL) == []
