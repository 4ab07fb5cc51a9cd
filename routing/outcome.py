"""A Signal's route attempts and its settlement: each try recorded under its idempotency key,
and the final decision stored with what the thread is told of it, in one transaction."""

from __future__ import annotations

from routing.notes import announce_in
from routing.result import Decision, IngestResult
from runtime.clock import Clock
from runtime.ids import TaskId
from runtime.reporting import ReportingPolicy
from runtime.scheduler import Scheduler
from runtime.store import signals as store
from runtime.store.engine import Database, Transaction
from runtime.store.signals import SignalRecord


class Ledger:
    """Records attempts and settles signals. ``reporting=None`` queues no 👀 (routing on its
    own, as the routing tests use it)."""

    def __init__(
        self,
        db: Database,
        scheduler: Scheduler,
        clock: Clock,
        reporting: ReportingPolicy | None,
    ) -> None:
        self.db = db
        self.scheduler = scheduler
        self.clock = clock
        self.reporting = reporting

    def attempt_in(
        self,
        session: Transaction,
        record: SignalRecord,
        target: TaskId | None,
        key: str,
        outcome: str,
    ) -> None:
        store.add_attempt(
            session,
            record.signal_id,
            target_task_id=target,
            idempotency_key=key,
            outcome=outcome,
            now=self.clock.now(),
        )

    async def attempt(
        self, record: SignalRecord, target: TaskId | None, key: str, outcome: str
    ) -> None:
        await self.db.run(lambda s: self.attempt_in(s, record, target, key, outcome))

    def settle_in(
        self,
        session: Transaction,
        record: SignalRecord,
        decision: Decision,
        reason: str | None,
        task_id: TaskId | None = None,
    ) -> IngestResult:
        """The final decision, and in the same transaction what the thread is told of it."""
        store.set_decision(session, record.signal_id, decision, reason, task_id)
        result = IngestResult(record.signal_id, decision, reason, task_id)
        if self.reporting is not None:
            announce_in(session, self.reporting, record, result, self.clock.now())
        return result

    async def settle(
        self,
        record: SignalRecord,
        decision: Decision,
        reason: str | None,
        task_id: TaskId | None = None,
    ) -> IngestResult:
        result = await self.db.run(lambda s: self.settle_in(s, record, decision, reason, task_id))
        self.scheduler.wake()
        return result
