"""SIGKILL a real worker at every boundary of a task that opens a pull request and pushes
again, restart it, and check the link: exactly one pull_links row, on the task's objective,
whenever the pull request exists, with the head of the last push; never a link without the
pull request's evidence (they share the settlement's transaction)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.store import ledger
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.models import PullLinkRow
from tests.recovery.restarts import points_reached, problems_at, sampled
from tests.recovery.single import run_task

SCRIPT = {
    "scripts": [
        {
            "turns": [
                {"tool_calls": [{"name": "open_pull", "args": {"title": "fix"}}]},
                {"say": "opened"},
            ]
        }
    ]
}
PARALLEL = 2


async def _observe(db_url: str, folder: Path, task_id: str) -> list[str]:
    db = Database.from_url(db_url)

    def read(session: Any) -> tuple[Any, ...]:
        rows = list(session.query(PullLinkRow))
        evidence = [e for e in ledger.evidence_of_tree(session, task_id)]
        return rows, evidence, q.get_task(session, task_id)

    rows, evidence, task = await db.read(read)
    db.close()
    pulls = folder / "pulls.log"
    opened = len(pulls.read_text().splitlines()) if pulls.exists() else 0
    problems = []
    prs = [e for e in evidence if e.item.kind == "pull_request"]
    if opened > 1:
        problems.append(f"{opened} pull requests opened")
    if len(rows) != len(prs) or len(rows) > 1:
        problems.append(f"{len(rows)} links for {len(prs)} pull request evidence")
    for row in rows:
        if (row.objective_key, row.number, row.task_id) != (task.objective_key, 1, task_id):
            problems.append(f"link {row.objective_key} #{row.number} {row.task_id}")
    if opened == 1 and not rows:  # reconcile finds an opened pull request by its call
        problems.append("pull request opened, but not linked")
    return problems


async def test_pull_request_link_is_written_once_with_its_evidence_at_every_kill_point(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    url = db_factory()
    task_id = await run_task(url, tmp_path / "baseline", SCRIPT, trace=trace)
    assert await _observe(url, tmp_path / "baseline", task_id) == []
    points = points_reached(trace)
    assert "settled:call_0_0#1" in points and "started:call_0_0#1" in points, points
    points = sampled(points)
    urls = [db_factory() for _ in points]

    async def one(index: int, point: str) -> list[str]:
        folder = tmp_path / f"kill{index}"
        task_id = await run_task(urls[index], folder, SCRIPT, fault=point)
        return [f"{point}: {p}" for p in await _observe(urls[index], folder, task_id)]

    assert await problems_at(points, one, PARALLEL) == []
