"""SIGKILL the intake at every boundary it persists, restart (the provider redelivers), check.

Each run ingests a mention (the one-transaction path) and a follow-up whose first append the
store refuses (the stored-plan path). Whatever point the process dies at, after a restart
every accepted signal has exactly one effect and one acknowledgement: one task, one mailbox
message, one 👀 row per signal in the outbox, and no escalation.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from runtime.store.engine import Database
from runtime.store.models import MailboxMessageRow, OutboxRow, SignalRow, TaskRow
from tests.recovery.intake_main import FOLLOW_UP, MENTION, THREAD
from tests.recovery.restarts import sampled

ROOT = Path(__file__).resolve().parents[2]


def _run(db_url: str, *, fault: str | None = None, trace: Path | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_FAULT")}
    if fault:
        env["KEEL_FAULT"] = fault
    if trace:
        env["KEEL_FAULT_TRACE"] = str(trace)
    command = [sys.executable, "-m", "tests.recovery.intake_main", db_url]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert done.returncode in (0, -9), done.stderr.decode()[-2000:]
    return done.returncode


def _problems(db_url: str) -> list[str]:
    db = Database.from_url(db_url)
    try:
        tasks = db.read_sync(lambda s: list(s.scalars(select(TaskRow))))
        signals = db.read_sync(lambda s: list(s.scalars(select(SignalRow))))
        messages = db.read_sync(lambda s: list(s.scalars(select(MailboxMessageRow))))
        posts = db.read_sync(lambda s: list(s.scalars(select(OutboxRow))))
    finally:
        db.close()
    problems = []
    if [t.objective_key for t in tasks] != [THREAD]:
        problems.append(f"{len(tasks)} tasks")
    decisions = {s.delivery_id: s.decision for s in signals}
    wanted = {MENTION.delivery_id: "new_task", FOLLOW_UP.delivery_id: "append"}
    if decisions != wanted:
        problems.append(f"decisions {decisions}")
    if [m.idempotency_key for m in messages] != [FOLLOW_UP.dedupe_key]:
        problems.append(f"mailbox {[m.idempotency_key for m in messages]}")
    acks = sorted(p.idempotency_key for p in posts if p.purpose == "ack")
    if acks != sorted(f"ack:{s.signal_id}" for s in signals):
        problems.append(f"acks {acks}")
    escalations = [p.idempotency_key for p in posts if p.purpose == "escalation"]
    if escalations:
        problems.append(f"escalations {escalations}")
    return problems


async def test_every_mention_has_one_task_and_one_ack_when_intake_is_killed_anywhere(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    baseline = db_factory()
    assert _run(baseline, trace=trace) == 0
    assert _problems(baseline) == []
    points = list(dict.fromkeys(trace.read_text().split()))
    # Both paths: received, committed (the mention); received, planned, applied (the follow-up).
    assert {p.split("#")[0] for p in points} == {
        "intake:received", "intake:committed", "intake:planned", "intake:applied"
    }, points

    async def one(point: str) -> list[str]:
        url = db_factory()
        killed = await asyncio.to_thread(_run, url, fault=point)
        assert killed == -9, f"{point} was not reached"
        await asyncio.to_thread(_run, url)  # the restart: redeliveries, then resume_pending
        return [f"{point}: {p}" for p in await asyncio.to_thread(_problems, url)]

    found = [p for point in sampled(points) for p in await one(point)]
    assert found == []
