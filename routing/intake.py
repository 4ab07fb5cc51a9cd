"""Intake: what happens to a webhook, from a Signal to its effect and its acknowledgement.

``Router.ingest`` stores the Signal, decides it (``routing.admission``) and carries the
decision out (``routing.effects``) in **one transaction**: the task it starts, the mailbox
message it appends or the stop it records, the RouteAttempt, the final decision and the outbox
row of the 👀 (or of the escalation) commit together or not at all. On SQLite concurrent
webhooks share that commit through the group committer.

When the effect cannot settle in that transaction (the store refused it, or the target
answers ambiguously) the transaction is abandoned and the Signal is stored ``pending`` with
its plan, the serialised Route. The same code then carries the route out, one transaction per
try, and ``resume_pending`` does so after a crash from the stored plan, so a resumed plan gets
its 👀 too. Every effect is keyed (mailbox key, creation key, cancel is idempotent): a second
run converges.

A person's request whose permission is not known yet comes in through the held stage
(``routing/held.py``) and reaches ``ingest`` once its permission is looked up. ``run`` is the
intake's one retry loop, for both: the pending plans and the held deliveries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

from routing.admission import Decided, Taken, admit_in, decided, dropped
from routing.daemons import matching_daemons
from routing.effects import Again, Effects, effect_key
from routing.enrich import in_its_objective, in_its_thread
from routing.held import POLL_S, HeldDeliveries
from routing.locks import ObjectiveLocks
from routing.notes import capped_in, refuse_in
from routing.outcome import Ledger
from routing.plan import BadPlan, from_plan
from routing.policy import RoutingPolicy
from routing.result import IngestResult, result_of
from routing.router import Drop, Route
from routing.signal import Ignored, Signal
from runtime.clock import Clock, SystemClock
from runtime.errors import KeelError, Retryable
from runtime.executor.faults import FaultPlan
from runtime.reporting import ReportingPolicy
from runtime.scheduler import Scheduler
from runtime.store import signals as store
from runtime.store.engine import Database, Transaction, UniqueViolation
from runtime.store.signals import PENDING, Admission, Redelivered, SignalFacts, SignalRecord

__all__ = ["IngestResult", "Router"]

log = logging.getLogger(__name__)

DecideOn = Callable[[Admission], Decided]


class _Unsettled(Exception):
    """Abandons the admitting transaction: the plan is stored pending and carried out apart."""


# What may stop the request's transaction short of settling: an ambiguous target, the store
# refusing or unavailable (Keel's own errors), a concurrent writer of the same key.
_NOT_SETTLED = (_Unsettled, KeelError, UniqueViolation)


class Router:
    """Signals in, effects and acknowledgements out. ``reporting=None`` queues no 👀
    (routing on its own, as the routing tests use it)."""

    def __init__(
        self,
        scheduler: Scheduler,
        db: Database,
        policy: RoutingPolicy,
        clock: Clock | None = None,
        *,
        reporting: ReportingPolicy | None = None,
        retry_delays: tuple[float, ...] = (0.05, 0.2, 0.5),
        faults: FaultPlan | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.db = db
        self.policy = policy
        self.clock = clock or SystemClock()
        self.retry_delays = retry_delays
        # Keel passes its one plan; a router built alone (the recovery drivers) reads its own.
        self.faults = faults or FaultPlan.from_env()
        self._locks = ObjectiveLocks()
        self._ledger = Ledger(db, scheduler, self.clock, reporting)
        self._effects = Effects(scheduler, policy, self._ledger)

    @property
    def reporting(self) -> ReportingPolicy | None:
        return self._ledger.reporting

    @reporting.setter
    def reporting(self, reporting: ReportingPolicy | None) -> None:
        self._ledger.reporting = reporting

    async def ingest(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult:
        """Store, decide and apply one delivery; a redelivery returns what the first became."""
        if isinstance(outcome, Ignored):
            return await self._ingest_ignored(outcome, provider, delivery_id, raw_kind)
        signal = await in_its_objective(self.db, await in_its_thread(self.db, outcome))
        facts = _facts(signal, provider, delivery_id)
        daemons = matching_daemons(signal, self.policy.daemons)
        keys = (signal.objective_key, *(d.objective_key for d in daemons))

        def decide_on(admission: Admission) -> Decided:
            return decided(signal, admission, self.policy)

        self.faults.hit("intake:received")
        async with self._locks.hold(keys):
            try:
                result = await self.db.run(
                    lambda s: self._intake(s, facts, keys, decide_on, signal)
                )
            except _NOT_SETTLED:
                return await self._plan_then_carry_out(facts, keys, decide_on)
            except Exception:
                # Not a failure this path expects: the signal is kept pending with its plan,
                # for ``resume_pending``, and the error goes on to the caller's boundary.
                log.exception("signal %s:%s: intake failed; kept pending", provider, delivery_id)
                await self.db.run(lambda s: admit_in(s, facts, keys, decide_on))
                raise
        self.faults.hit("intake:committed")
        if result.decision != "drop":
            self.scheduler.wake()
        return result

    async def run(
        self,
        stopping: asyncio.Event,
        *,
        every_s: float = 10.0,
        held: HeldDeliveries | None = None,
    ) -> None:
        """The intake's one retry loop, until ``stopping``. It resumes the plans no request
        is carrying out any more every ``every_s``; given ``held`` (``keel serve``), it also
        starts resolving held deliveries as they come due, woken by each one held or
        finished and every ``POLL_S`` in any case. Stopping cancels the lookups in flight:
        their deliveries stay held for the next start."""
        loop = asyncio.get_running_loop()
        next_pass = loop.time()
        # A pass runs beside the held stage, so plans retrying their delays never hold up a
        # delivery waiting for its lookup; one pass at a time.
        resuming: asyncio.Task[None] | None = None
        try:
            while not stopping.is_set():
                if held is not None:
                    await held.start_due()
                if loop.time() >= next_pass and (resuming is None or resuming.done()):
                    resuming = asyncio.create_task(self._resume_pass())
                    next_pass = loop.time() + every_s
                wait_s = max(0.0, next_pass - loop.time())
                if held is None:
                    await _first_set([stopping], wait_s)
                else:
                    await _first_set([stopping, held.wake], min(wait_s, POLL_S))
        finally:
            if resuming is not None:
                await resuming  # a pass in progress finishes: each plan it carries is keyed
            if held is not None:
                await held.stop()

    async def _resume_pass(self) -> None:
        # An open repository question is looked at again on every pass, so one whose time
        # is up (maybe sooner than the crash cutoff) ends without waiting for it.
        cutoff = timedelta(seconds=min(30.0, self.policy.repo_question_s))
        try:
            await self.resume_pending(older_than=cutoff)
        except Exception:  # the loop's boundary: the store may be away; next pass retries
            log.exception("resuming pending signals failed")

    async def resume_pending(
        self, *, older_than: timedelta = timedelta(seconds=30), limit: int = 100
    ) -> list[IngestResult]:
        """Carry out plans a crash left pending; each converges on the effect it planned."""
        cutoff = self.clock.now() - older_than
        found = await self.db.run(lambda s: store.pending_signals(s, cutoff, limit))
        results = []
        for record in found:
            result = await self._resume(record)
            if result is not None:
                results.append(result)
        return results

    async def _resume(self, record: SignalRecord) -> IngestResult | None:
        async with self._locks.hold([record.objective_key or record.signal_id]):
            # Re-read under the lock: an ingest in this process may have finished it meanwhile.
            current = await self.db.run(lambda s: store.get_signal(s, record.signal_id))
            if current is None or current.decision != PENDING:
                return None
            try:
                route = _route_of(current)
            except BadPlan as e:
                return await self._ledger.settle(current, "escalated", str(e))
            return await self._carry_out(current, route)

    async def _ingest_ignored(
        self, ignored: Ignored, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult:
        facts = SignalFacts(
            provider=provider,
            delivery_id=delivery_id,
            dedupe_key=f"drop:{provider}:{delivery_id}",
            kind=raw_kind,
            thread_ref=None,
            objective_key=None,
            actor=None,
            text=ignored.detail,
            received_at=self.clock.now(),
        )
        drop = dropped(Drop(ignored.reason))
        taken = await self.db.run(lambda s: admit_in(s, facts, (), lambda _: drop))
        if isinstance(taken, Redelivered):
            return result_of(taken.record, duplicate=True)
        return result_of(taken.record)

    def _intake(
        self,
        session: Transaction,
        facts: SignalFacts,
        keys: tuple[str, ...],
        decide_on: DecideOn,
        signal: Signal,
    ) -> IngestResult:
        """The request path's one transaction: admit, decide, apply, settle, acknowledge."""
        taken = admit_in(session, facts, keys, decide_on)
        if isinstance(taken, Redelivered):
            return result_of(taken.record, duplicate=True)
        record = taken.record
        if record.decision != PENDING:
            if self.reporting is not None:
                refuse_in(session, record, self.clock.now())
                if record.reason == "capped":
                    capped_in(session, record, signal, self.policy.max_ci_fixes, self.clock.now())
            return result_of(record)
        outcome = self._effects.apply_in(session, record, taken.route)
        if isinstance(outcome, Again):
            raise _Unsettled(outcome.cause)
        return outcome

    async def _plan_then_carry_out(
        self, facts: SignalFacts, keys: tuple[str, ...], decide_on: DecideOn
    ) -> IngestResult:
        """The effect did not settle with the admission: store the plan, then carry it out."""
        taken: Taken | Redelivered = await self.db.run(
            lambda s: admit_in(s, facts, keys, decide_on)
        )
        self.faults.hit("intake:planned")
        if isinstance(taken, Redelivered):
            return result_of(taken.record, duplicate=True)
        record = taken.record
        if record.decision != PENDING:
            return result_of(record)
        return await self._carry_out(record, taken.route)

    async def _carry_out(self, record: SignalRecord, route: Route) -> IngestResult:
        """Apply a pending route, one transaction per try, at most ``1 + len(retry_delays)``.

        Out of tries on an ambiguous owner it escalates; out of tries on transient errors the
        signal stays pending, for ``resume_pending`` once the store is back.
        """
        target, key = effect_key(record, route)
        again = Again("not tried")
        for delay in (*self.retry_delays, None):
            try:
                outcome = await self.db.run(lambda s: self._effects.apply_in(s, record, route))
            except (Retryable, UniqueViolation) as e:
                # A unique violation is a concurrent writer of the same key: the next try
                # finds what it wrote.
                cause = str(e) if isinstance(e, Retryable) else "concurrent write"
                again = Again(f"transient: {cause}", transient=True)
                await self._ledger.attempt(record, target, key, "retryable")
            else:
                if isinstance(outcome, IngestResult):
                    self.faults.hit("intake:applied")
                    self.scheduler.wake()
                    return outcome
                again = outcome
            if delay is not None:
                await asyncio.sleep(delay)
        if again.transient:
            return result_of(record)
        reason = f"{again.cause}; not starting a second owner"
        return await self._ledger.settle(record, "escalated", reason, target)


async def _first_set(events: list[asyncio.Event], timeout: float) -> None:
    """Until one of ``events`` is set, or ``timeout`` seconds."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()


def _route_of(record: SignalRecord) -> Route:
    """The route a pending signal was stored with, read back only to resume it."""
    if record.plan is None:
        raise BadPlan(f"pending signal {record.signal_id} has no plan")
    return from_plan(record.plan)


def _facts(signal: Signal, provider: str, delivery_id: str) -> SignalFacts:
    return SignalFacts(
        provider=provider,
        delivery_id=delivery_id,
        dedupe_key=signal.dedupe_key,
        kind=signal.kind,
        thread_ref=signal.thread_ref,
        objective_key=signal.objective_key,
        actor=signal.actor,
        text=signal.text,
        received_at=signal.received_at,
        message_ref=signal.message,
        url=signal.url,
    )
