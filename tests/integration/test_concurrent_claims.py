"""Two workers claiming at the same moment each take a delivery, oldest first.

On PostgreSQL a claim locks the ready delivery it looks at (``FOR UPDATE SKIP LOCKED``) until
it commits, and a concurrent claim skips locked rows. A claim used to lock a batch of up to
eight: when a few deliveries were left, one worker's claim held them all, the other's found
nothing ready and slept a poll interval while work was waiting (the scale-out benchmark saw
one worker idle for the last ~0.4 s of every drain).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from runtime.leases import Claimed, NoMatch
from runtime.scheduler import Scheduler
from runtime.store import signals
from runtime.store.engine import Database, Transaction
from runtime.threads import SlackThread
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


async def test_a_locked_signal_is_read_as_committed_after_the_wait(database: Database) -> None:
    """Two picks of one repository question at once: the second locks the question after the
    first and reads the decision the first wrote, so it does not start a second task."""
    if not database.is_postgres:
        pytest.skip("PostgreSQL's: SQLite runs one writer at a time, so no two picks overlap")
    now = datetime.now(UTC)
    thread = SlackThread("T1", "C1", "1700000000.000100")
    facts = signals.SignalFacts(
        "slack", "Ev-pick-1", "slack:msg:pick", "mention", thread, None, None, "fix it", now
    )

    def ask(session: Transaction) -> str:
        admission = signals.read_admission(session, facts, [])
        assert isinstance(admission, signals.Admission)
        stored = signals.insert_signal(session, facts, admission, signals.Verdict("pending"))
        assert stored is not None
        return stored.signal_id

    question = database.run_sync(ask)
    holding, finish = threading.Event(), threading.Event()

    def first(session: Transaction) -> None:
        locked = signals.get_signal(session, question, lock=True)
        assert locked is not None and locked.decision == signals.PENDING
        holding.set()
        finish.wait(10)
        signals.set_decision(session, question, "new_task", "chose probe/two", None)

    def second(session: Transaction) -> str:
        locked = signals.get_signal(session, question, lock=True)
        assert locked is not None
        return str(locked.decision)

    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(database.run_sync, first)
        assert holding.wait(10)
        two = pool.submit(database.run_sync, second)
        time.sleep(0.3)
        assert not two.done()  # it waits for the first pick's lock
        finish.set()
        one.result(timeout=10)
        assert two.result(timeout=10) == "new_task"
