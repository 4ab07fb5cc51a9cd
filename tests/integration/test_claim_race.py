"""Exactly one winner per delivery token among claimers in separate processes."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from typing import Any

from runtime.leases import Claimed
from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from tests.factories import make_spec

CLAIMERS = 8
ROUNDS = 200


def _claimer(url: str, name: str, tokens: list[str], barrier: Any, results: Any) -> None:
    async def run() -> None:
        db = Database.from_url(url)
        scheduler = Scheduler(db)
        for index, token in enumerate(tokens):
            barrier.wait()
            outcome = await scheduler.leases.claim(token, name)
            results.put((index, name, isinstance(outcome, Claimed)))
        db.close()

    asyncio.run(run())


async def test_exactly_one_claimer_wins_when_eight_processes_race_for_each_token(
    db_url: str, database: Database, scheduler: Scheduler
) -> None:
    tokens = []
    for _ in range(ROUNDS):
        task = (await scheduler.transact(scheduler.schedule, make_spec())).task
        tokens.append(await _token_of(database, task.task_id))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(CLAIMERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_claimer, args=(db_url, f"w{i}", tokens, barrier, results))
        for i in range(CLAIMERS)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in range(ROUNDS * CLAIMERS)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    winners: dict[int, list[str]] = {}
    for index, name, won in outcomes:
        if won:
            winners.setdefault(index, []).append(name)
    assert sorted(winners) == list(range(ROUNDS))
    assert all(len(names) == 1 for names in winners.values())


async def _token_of(database: Database, task_id: str) -> str:
    from sqlalchemy import select

    from runtime.store.models import DeliveryRow

    return database.run_sync(
        lambda s: s.scalars(select(DeliveryRow.token).where(DeliveryRow.task_id == task_id)).one()
    )
