"""Two workers claiming at the same moment each take a delivery, oldest first.

On PostgreSQL a claim locks the ready delivery it looks at (``FOR UPDATE SKIP LOCKED``) until
it commits, and a concurrent claim skips locked rows. A claim used to lock a batch of up to
eight: when a few deliveries were left, one worker's claim held them all, the other's found
nothing ready and slept a poll interval while work was waiting (the scale-out benchmark saw
one worker idle for the last ~0.4 s of every drain).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from runtime.leases import Claimed, NoMatch
from runtime.scheduler import Scheduler
from runtime.store.engine import Database, Transaction
from tests.factories import make_spec


async def test_a_claim_racing_another_for_the_last_deliveries_takes_the_next_one(
    database: Database, scheduler: Scheduler,
) -> None:
    if not database.is_postgres:
        pytest.skip("PostgreSQL's: SQLite runs one writer at a time, so no two claims overlap")
    queued = [
        (await scheduler.transact(scheduler.schedule, make_spec())).task.task_id for _ in range(3)
    ]
    holding, finish = threading.Event(), threading.Event()

    def claim_and_hold(session: Transaction) -> Claimed | NoMatch:
        outcome = scheduler.leases._claim_next(session, "worker-a", 8)
        holding.set()  # still in the claim's transaction: its locks are held
        finish.wait(10)
        return outcome

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(database.run_sync, claim_and_hold)
        assert holding.wait(10)
        try:
            second = await scheduler.leases.claim_next("worker-b")
        finally:
            finish.set()
        held = first.result(timeout=10)
    assert isinstance(held, Claimed)
    assert isinstance(second, Claimed), second
    assert [held.task.task_id, second.task.task_id] == queued[:2]
    third = await scheduler.leases.claim_next("worker-a")
    assert isinstance(third, Claimed)
    assert third.task.task_id == queued[2]
    assert isinstance(await scheduler.leases.claim_next("worker-b"), NoMatch)
