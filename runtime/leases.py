"""Claims and leases: which worker runs a task now, until when, and giving the task back.

Claims are decided by the database: a delivery token is consumed by exactly one conditional
update, on SQLite and on PostgreSQL alike, and the lease it grants moves the execution's
version, so a worker that lost its lease cannot commit. A claim marks the task running: the
one status write outside the scheduler, made with the claim it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runtime.clock import Clock
from runtime.store import deliveries, executions
from runtime.store import tasks as q
from runtime.store.engine import Database, Transaction
from runtime.store.records import Lease, Task


@dataclass(frozen=True, slots=True)
class Claimed:
    task: Task
    lease: Lease


@dataclass(frozen=True, slots=True)
class NoMatch:
    reason: str


class Leases:
    def __init__(self, db: Database, clock: Clock, lease_seconds: float) -> None:
        self.db = db
        self.clock = clock
        self.lease_seconds = lease_seconds

    async def claim(self, token: str, worker: str) -> Claimed | NoMatch:
        return await self.db.run(lambda s: self._claim(s, token, worker))

    def _claim(self, session: Transaction, token: str, worker: str) -> Claimed | NoMatch:
        now = self.clock.now()
        task_id = deliveries.consume_delivery(session, token, worker, now)
        if task_id is None:
            return NoMatch("no matching pending delivery")
        if not q.lock_task_row(session, task_id):  # the task before its execution
            return NoMatch("task missing")
        lease = executions.take_lease(session, task_id, worker, now, self.lease_seconds)
        if lease is None:
            return NoMatch(_not_leased(session, task_id))
        task = q.start_running(session, task_id, now)
        if task is None:
            return NoMatch("task missing")
        return Claimed(task, lease)

    async def claim_next(self, worker: str, *, scan: int = 8) -> Claimed | NoMatch:
        """Claim the oldest ready delivery (PostgreSQL: ``FOR UPDATE SKIP LOCKED``).

        On SQLite an idle worker first looks without the write lock, so polling for work
        does not queue behind (or delay) the writers that are doing some.
        """
        if not self.db.is_postgres:
            now = self.clock.now()
            ready = await self.db.read(lambda s: deliveries.next_ready_tokens(s, now, 1, False))
            if not ready:
                return NoMatch("nothing ready")
        # Unflushed (``Database.run``): a claim lost in a crash of the database server
        # leaves the delivery to be claimed again, and the lease it took is gone, so this
        # worker's next transition finds the run fenced off.
        return await self.db.run(lambda s: self._claim_next(s, worker, scan), flush=False)

    def _claim_next(self, session: Transaction, worker: str, scan: int) -> Claimed | NoMatch:
        """Look up ready deliveries one at a time, oldest first, trying at most ``scan``.

        On PostgreSQL each lookup locks only the row it returns (``SKIP LOCKED``): a worker
        claiming at the same moment takes the next delivery. Locking a batch made a claim
        that raced for the last few deliveries find all of them locked, so that worker slept
        a poll interval while work was still ready. A delivery tried and not won (its task
        gone, or its lease held) is consumed all the same, so the next lookup passes it.
        """
        now = self.clock.now()
        for _ in range(scan):
            tokens = deliveries.next_ready_tokens(session, now, 1, skip_locked=self.db.is_postgres)
            if not tokens:
                break
            outcome = self._claim(session, tokens[0], worker)
            if isinstance(outcome, Claimed):
                return outcome
        return NoMatch("nothing ready")

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend a lease still held; None if it was lost (expired and recovered)."""

        def renew(session: Transaction) -> Lease | None:
            now = self.clock.now()
            expires = executions.renew_lease(
                session, lease.task_id, lease.lease_id, now, self.lease_seconds
            )
            if expires is None:
                return None
            return Lease(lease.task_id, lease.lease_id, lease.owner, expires)

        return await self.db.run(renew)

    def release(self, session: Transaction, lease: Lease, next_tick_at: datetime | None) -> bool:
        """Give the lease back in the caller's transaction, optionally scheduling the next
        tick. False if it was already lost."""
        now = self.clock.now()
        if not executions.give_back_lease(session, lease.task_id, lease.lease_id):
            return False
        if next_tick_at is not None:
            deliveries.add_delivery(session, lease.task_id, "tick", next_tick_at, now)
            notify_in(self.db, session)
        return True


def notify_in(db: Database, session: Transaction) -> None:
    """Wake workers on other machines once this transaction commits (PostgreSQL's
    ``NOTIFY``; on SQLite every worker is in this process and is woken after the commit)."""
    if db.is_postgres:
        session.connection().exec_driver_sql("NOTIFY keel_ready")


def _not_leased(session: Transaction, task_id: str) -> str:
    """Why a claim found no lease to take (read after the fact: this is the rare path)."""
    execution = executions.lock_execution(session, task_id)
    if execution is None:
        return "task missing"
    if execution.phase == "done":
        return "execution already done"
    return "another worker holds the lease"
