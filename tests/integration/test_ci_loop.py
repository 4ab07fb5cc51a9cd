"""The CI loop end to end over the emulators and a real git remote: the demo's job opens a
pull request; a failed check on its head starts one linked task that reads the check's
summary and the tail of its Actions job log, works on the pull request's branch and pushes a
fix; the same check failing again on that old head is
ignored, and when the new head fails too the objective is at routing.max_ci_fixes, so Keel
says once on the pull request that it stopped trying and starts nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from adapters.demo.repo import branch_head
from adapters.emulators.corpus import load_github_example
from adapters.emulators.github_state import CheckRun
from runtime.store.engine import Database
from runtime.store.models import OutboxRow, SignalRow, TaskRow
from runtime.store.records import TaskStatus
from tests.integration.keel_live import CHANNEL, SHOP, demo_script_after, drive, live_keel

JOB = 7001  # the failing check run's id, which is its Actions job's
LOG = "\n".join(
    [*(f"noise line {n}" for n in range(500)), "E   assert add(-2, -3) == -5", "1 failed"]
)
FIXED = '''"""Tiny arithmetic helpers used by the checkout."""


def add(a: int, b: int) -> int:
    return b + a
'''


def _script(folder: Path) -> Path:
    ci_fix = {
        "match": "tests: failure on",
        "turns": [
            {
                "expect_seen": ["test_add_negative: AssertionError", f"check run {JOB}"],
                "tool_calls": [{"name": "ci_job_log", "args": {"check_run_id": JOB}}],
            },
            {
                "expect_seen": ["E   assert add(-2, -3) == -5"],
                "tool_calls": [
                    {"name": "write_file", "args": {"path": "calc.py", "content": FIXED}}
                ],
            },
            {"tool_calls": [{"name": "git_commit", "args": {"message": "Fix for CI"}}]},
            {"tool_calls": [{"name": "git_push", "args": {"branch": "keel/fix-add"}}]},
            {"say": "Fixed the failing check and pushed."},
        ],
    }
    return demo_script_after(folder, ci_fix)


def _failed(sha: str, job: int = JOB) -> dict[str, Any]:
    return load_github_example(
        "check_run/completed",
        **{
            "repository.full_name": SHOP,
            "repository.name": "shop",
            "repository.owner.login": "acme",
            "check_run.id": job,
            "check_run.name": "tests",
            "check_run.head_sha": sha,
            "check_run.conclusion": "failure",
            "check_run.output.title": "1 test failed",
            "check_run.output.summary": "test_add_negative: AssertionError",
            "check_run.check_suite.head_sha": sha,
            "check_run.check_suite.head_branch": "keel/fix-add",
        },
    )


async def test_failed_check_on_the_head_gets_one_fix_per_sha_and_stops_at_the_cap(
    db_url: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "keel"
    origin = workdir / "origin" / "acme" / "shop.git"
    extra = {"model": {"script": str(_script(tmp_path / "model"))}, "routing": {"max_ci_fixes": 1}}
    with live_keel(workdir, db_url, workers=True, extra=extra) as live:
        _, root = await drive(live)
        objective = f"slack:{live.slack.team_id}/{CHANNEL}/{root}"
        db = Database.from_url(db_url)
        head = branch_head(origin, "keel/fix-add")
        assert head is not None
        failing = CheckRun(JOB, "tests", head, "completed", "failure", time.time())
        live.github.repos[SHOP].checks[head] = [failing]
        live.github.set_job_log(SHOP, JOB, LOG)
        await live.send_github("check_run", _failed(head), delivery_id="ci-1", times=2)

        async def tasks() -> list[Any]:
            query = select(TaskRow).where(TaskRow.objective_key == objective)
            return await db.read(lambda s: list(s.scalars(query.order_by(TaskRow.created_at))))

        async with asyncio.timeout(90):
            while not (
                len(found := await tasks()) == 2 and TaskStatus(found[1].status).is_terminal
            ):
                await asyncio.sleep(0.1)
        fixed = branch_head(origin, "keel/fix-add")
        assert fixed is not None
        await live.send_github("check_run", _failed(head), delivery_id="ci-2")  # again, old head
        await live.send_github("check_run", _failed(fixed, 7002), delivery_id="ci-3")  # new head

        async def capped() -> list[Any]:
            query = select(OutboxRow).where(OutboxRow.purpose == "ci_cap")
            return await db.read(lambda s: list(s.scalars(query)))

        async with asyncio.timeout(30):
            while not (caps := await capped()):
                await asyncio.sleep(0.1)
        rows = await db.read(lambda s: list(s.scalars(select(SignalRow))))
        final = await tasks()
        db.close()
    assert fixed != head
    assert [t.status for t in final] == ["succeeded", "succeeded"]
    assert final[1].origin_thread_ref == f"github:{SHOP}#1"
    ci = [(r.delivery_id, r.decision, r.reason) for r in rows if r.kind == "ci_result"]
    assert ("ci-1", "new_task", None) in [(d, k, None) for d, k, _ in ci]
    assert {(d, k) for d, k, _ in ci if d in ("ci-2", "ci-3")} == {
        ("ci-2", "drop"),
        ("ci-3", "drop"),
    }
    assert {r for d, _, r in ci if d == "ci-3"} == {"capped"}
    assert len(caps) == 1 and caps[0].thread_ref == f"github:{SHOP}#1"
