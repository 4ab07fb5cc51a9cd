"""Transactions that write a task and its execution lock the task first, so none deadlock.

A mailbox append, a stop and a child's result lock the task row and then the execution row.
A claim used to take the execution's lease first and then mark the task running: with an
append holding the task and wanting the execution, PostgreSQL found a deadlock and ended one
of them (seen in CI as a failed approval). These tests hold the task row as an append does,
let the other transaction start, then take the execution as the append would next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TypeVar

import pytest
from sqlalchemy import text

from runtime.errors import Retryable
from runtime.leases import Claimed, NoMatch
from runtime.scheduler import Scheduler
from runtime.store import deliveries
from runtime.store.engine import Database, Transaction
from tests.factories import make_spec

T = TypeVar("T")


def _as_an_append_would(database: Database, task_id: str, other: Callable[[], Future[T]]) -> T:
    """Lock the task, start ``other``, give it time to block, then lock the execution."""
    with database.engine.connect() as conn, conn.begin():
        conn.execute(text("SET LOCAL lock_timeout = '5s'"))
        conn.execute(text("SELECT id FROM tasks WHERE id = :id FOR UPDATE"), {"id": task_id})
        pending = other()
        time.sleep(0.5)  # the other transaction is now waiting on a lock we hold
        assert not pending.done()
        conn.execute(
            text("SELECT task_id FROM executions WHERE task_id = :id FOR UPDATE"), {"id": task_id}
        )
    return pending.result(timeout=10)


async def test_a_claim_waits_for_an_append_holding_the_task_instead_of_deadlocking(
    database: Database, scheduler: Scheduler,
) -> None:
    if not database.is_postgres:
        pytest.skip("PostgreSQL's: SQLite runs one writer at a time, so no two interleave")
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    now = datetime.now(UTC)
    [token] = database.run_sync(lambda s: deliveries.next_ready_tokens(s, now, 1, False))
    started = threading.Event()

    def claim(session: Transaction) -> Claimed | NoMatch:
        started.set()
        return scheduler.leases._claim(session, token, "worker-1")

    with ThreadPoolExecutor(1) as pool:
        outcome = _as_an_append_would(
            database, task.task_id, lambda: pool.submit(database.run_sync, claim)
        )
    assert started.is_set()
    assert isinstance(outcome, Claimed)
    assert outcome.lease.task_id == task.task_id


async def test_a_transaction_postgresql_ends_to_break_a_deadlock_fails_as_retryable(
    database: Database, scheduler: Scheduler,
) -> None:
    """The remedy for a deadlock is running the transaction again: a webhook then answers
    503 (delivered again later) rather than 500."""
    if not database.is_postgres:
        pytest.skip("PostgreSQL's: SQLite runs one writer at a time, so no two interleave")
    first = (await scheduler.transact(scheduler.schedule, make_spec())).task.task_id
    second = (await scheduler.transact(scheduler.schedule, make_spec())).task.task_id
    holds_first, go = threading.Event(), threading.Event()
    lock = text("SELECT id FROM tasks WHERE id = :id FOR UPDATE")

    def first_then_second(session: Transaction) -> None:
        session.execute(lock, {"id": first})
        holds_first.set()
        go.wait(10)
        session.execute(lock, {"id": second})

    with ThreadPoolExecutor(1) as pool, database.engine.connect() as conn, conn.begin():
        conn.execute(text("SET LOCAL deadlock_timeout = '10s'"))  # the other side detects it
        conn.execute(lock, {"id": second})
        pending = pool.submit(database.run_sync, first_then_second)
        assert holds_first.wait(10)
        go.set()
        time.sleep(0.2)  # it now waits for the second row, which we hold
        conn.execute(lock, {"id": first})  # and we for the first: PostgreSQL ends the other
        with pytest.raises(Retryable, match="conflicted"):
            pending.result(timeout=10)
