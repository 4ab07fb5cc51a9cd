"""Route application: a Signal is stored, decided and carried out, and every try is recorded.

On the webhook request path ``Router.ingest`` stores the Signal together with its decision in
one transaction (``runtime.store.signals.admit``). A Drop is final there. A route with an
effect is stored as ``pending`` with its plan (the route in ``reason``, the target in
``task_id``), then performed through the scheduler's public operations, one RouteAttempt per
try, and the final decision overwrites the plan. A crash between the two leaves the plan
pending: ``resume_pending`` carries it out again, and every effect is keyed (mailbox key,
creation key, cancel is idempotent) so a second run converges instead of repeating.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Literal, assert_never, cast, get_args

from routing.daemons import DaemonDefinition, matching_daemons
from routing.policy import RoutingPolicy
from routing.router import (
    Append,
    Daemon,
    Drop,
    NewTask,
    RoutingView,
    Stop,
    TaskView,
    decide,
)
from routing.signal import Ignored, Signal
from runtime.clock import Clock, SystemClock
from runtime.errors import Retryable
from runtime.ids import SignalId, TaskId
from runtime.scheduler import (
    AlreadyTerminal,
    Appended,
    AppendOutcome,
    Duplicate,
    NotFound,
    Scheduler,
)
from runtime.store import signals as store
from runtime.store.engine import Database
from runtime.store.records import TaskSpec
from runtime.store.signals import PENDING, Admission, SignalFacts, SignalRecord, Verdict

Decision = Literal["append", "new_task", "drop", "daemon", "stop", "escalated", "pending"]
DECISIONS: frozenset[str] = frozenset(get_args(Decision))
ReadBack = Literal["missing", "terminal", "active", "unreadable"]


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What became of one delivery. ``duplicate`` means this delivery was seen before."""

    signal_id: SignalId
    decision: Decision
    reason: str | None
    task_id: TaskId | None
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class _Again:
    """A try that did not settle, and why; ``transient`` if only the store was unavailable."""

    cause: str
    transient: bool = False


@dataclass(frozen=True, slots=True)
class _Fresh:
    """How to start a new owner for a signal if its target cannot take it."""

    objective_key: str
    agent: str
    message: str
    decision: Decision


class ObjectiveLocks:
    """In-process serialisation of lookup-then-create per objective key.

    Two signals for one objective in one burst must not both see "no owner" and both start a
    task; across processes the objective's owner is still settled by the scheduler's answers.
    """

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, keys: Iterable[str]) -> AsyncIterator[None]:
        ordered = sorted(set(keys))  # one global order, so two holders cannot deadlock
        for key in ordered:
            self._users[key] = self._users.get(key, 0) + 1
        try:
            async with _all(self._locks.setdefault(key, asyncio.Lock()) for key in ordered):
                yield
        finally:
            for key in ordered:
                self._users[key] -= 1
                if not self._users[key]:
                    del self._users[key], self._locks[key]


@asynccontextmanager
async def _all(locks: Iterable[asyncio.Lock]) -> AsyncIterator[None]:
    held: list[asyncio.Lock] = []
    try:
        for lock in locks:
            await lock.acquire()
            held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            lock.release()


class Router:
    def __init__(
        self,
        scheduler: Scheduler,
        db: Database,
        policy: RoutingPolicy,
        clock: Clock | None = None,
        *,
        retry_delays: tuple[float, ...] = (0.05, 0.2, 0.5),
    ) -> None:
        self.scheduler = scheduler
        self.db = db
        self.policy = policy
        self.clock = clock or SystemClock()
        self.retry_delays = retry_delays
        self._locks = ObjectiveLocks()

    # -- entry points ---------------------------------------------------------------------

    async def ingest(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult:
        """Store, decide and apply one delivery; a redelivery returns what the first became."""
        if isinstance(outcome, Ignored):
            return await self._ingest_ignored(outcome, provider, delivery_id, raw_kind)
        facts = _facts(outcome, provider, delivery_id)
        daemons = matching_daemons(outcome, self.policy.daemons)
        keys = (outcome.objective_key, *(d.objective_key for d in daemons))
        async with self._locks.hold(keys):
            admitted = await self.db.run(
                lambda s: store.admit(s, facts, keys, lambda a: self._verdict(outcome, a))
            )
            if isinstance(admitted, store.Redelivered):
                return _result(admitted.record, duplicate=True)
            if admitted.record.decision != PENDING:
                return _result(admitted.record)
            return await self._carry_out(admitted.record)

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
            return await self._carry_out(current)

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
            actor={},
            text=ignored.detail,
            received_at=self.clock.now(),
        )
        verdict = Verdict("drop", ignored.reason)
        admitted = await self.db.run(lambda s: store.admit(s, facts, (), lambda _: verdict))
        return _result(admitted.record, duplicate=isinstance(admitted, store.Redelivered))

    # -- deciding -------------------------------------------------------------------------

    def _verdict(self, signal: Signal, admission: Admission) -> Verdict:
        route = decide(signal, self._view(signal, admission), self.policy)
        match route:
            case Drop(reason=reason):
                return Verdict("drop", reason)
            case Append(task=task):
                return Verdict(PENDING, "append", task.task_id)
            case NewTask(objective_key=objective, follows=follows):
                follows_id = follows.task_id if follows else None
                return Verdict(PENDING, "new_task", follows_id, objective_key=objective)
            case Stop(task=task):
                return Verdict(PENDING, "stop", task.task_id)
            case Daemon(name=name, objective_key=objective, task=task):
                target = task.task_id if task else _latest_ended(admission, objective)
                return Verdict(PENDING, f"daemon:{name}", target, objective_key=objective)
            case _:
                assert_never(route)

    def _view(self, signal: Signal, admission: Admission) -> RoutingView:
        states = admission.objectives
        own = states.get(signal.objective_key)
        daemon_tasks = {
            daemon.daemon_id: TaskView.of(state.active)
            for daemon in self.policy.daemons
            if (state := states.get(daemon.objective_key)) and state.active
        }
        return RoutingView(
            active_task=TaskView.of(own.active) if own and own.active else None,
            latest_task=(
                TaskView.of(own.latest_terminal) if own and own.latest_terminal else None
            ),
            is_duplicate=admission.is_duplicate,
            daemon_tasks=daemon_tasks,
        )

    # -- carrying out a plan --------------------------------------------------------------

    async def _carry_out(self, record: SignalRecord) -> IngestResult:
        route, _, name = (record.reason or "").partition(":")
        target = record.task_id
        match route:
            case "append" if target is not None:
                return await self._append(record, target, self._fresh(record), "append")
            case "new_task":
                return await self._new_task(record, self._fresh(record), follows=target)
            case "stop" if target is not None:
                return await self._stop(record, target)
            case "daemon":
                daemon = self._daemon(name)
                if daemon is None:
                    return await self._settle(record, "escalated", f"daemon {name!r} is gone")
                return await self._to_daemon(record, daemon, target)
            case _:
                return await self._settle(record, "escalated", f"unknown plan {record.reason!r}")

    async def _to_daemon(
        self, record: SignalRecord, daemon: DaemonDefinition, target: TaskId | None
    ) -> IngestResult:
        # The target may be the role's ended task: the append is refused as AlreadyTerminal
        # and the successor starts linked to it.
        fresh = _Fresh(daemon.objective_key, daemon.task_agent, _event_text(record), "daemon")
        if target is None:
            return await self._new_task(record, fresh, follows=None)
        return await self._append(record, target, fresh, "daemon")

    async def _append(
        self, record: SignalRecord, target: TaskId, fresh: _Fresh, decision: Decision
    ) -> IngestResult:
        """Append under (target, dedupe key); fall back to a new owner only on proof."""
        key = record.dedupe_key
        text = _event_text(record) if decision == "daemon" else record.text
        parts = [{"type": "text", "text": text}]

        async def step() -> IngestResult | _Again:
            outcome = await self.scheduler.append_mailbox(target, key, parts, _actor_id(record))
            return await self._after_append(record, target, fresh, decision, outcome)

        return await self._with_retries(record, target, key, step)

    async def _after_append(
        self,
        record: SignalRecord,
        target: TaskId,
        fresh: _Fresh,
        decision: Decision,
        outcome: AppendOutcome,
    ) -> IngestResult | _Again:
        key = record.dedupe_key
        match outcome:
            case Appended() | Duplicate():
                label = "appended" if isinstance(outcome, Appended) else "duplicate"
                await self._attempt(record, target, key, label)
                return await self._settle(record, decision, None, target)
            case AlreadyTerminal(status=status):
                await self._attempt(record, target, key, f"already_terminal:{status}")
                return await self._new_task(record, fresh, follows=target)
            case NotFound():
                state = await self._read_back(target)
                await self._attempt(record, target, key, f"not_found:{state}")
                if state in ("missing", "terminal"):
                    follows = target if state == "terminal" else None
                    return await self._new_task(record, fresh, follows=follows)
                # Still active or unreadable: a second owner would split the objective.
                return _Again(f"task {target} reads back {state} but refused the append")
            case _:
                assert_never(outcome)

    async def _read_back(self, task_id: TaskId) -> ReadBack:
        try:
            task = await self.scheduler.get(task_id)
        except Retryable:
            return "unreadable"
        if task is None:
            return "missing"
        return "terminal" if task.status.is_terminal else "active"

    async def _new_task(
        self, record: SignalRecord, fresh: _Fresh, *, follows: TaskId | None
    ) -> IngestResult:
        """Schedule under the creation key ``signal:{id}``; a task already made under it wins."""
        key = f"signal:{record.signal_id}"
        spec = self._spec(record, fresh, follows, key)

        async def step() -> IngestResult:
            existing = await self.db.run(lambda s: store.task_created_under(s, key))
            if existing is not None:
                await self._attempt(record, existing.task_id, key, "found_created")
                return await self._settle(record, fresh.decision, None, existing.task_id)
            task_id = (await self.scheduler.schedule(spec)).task.task_id
            await self._attempt(record, task_id, key, "scheduled")
            reason = f"follows {follows}" if follows else None
            return await self._settle(record, fresh.decision, reason, task_id)

        return await self._with_retries(record, None, key, step)

    async def _stop(self, record: SignalRecord, target: TaskId) -> IngestResult:
        key = f"stop:{record.signal_id}"
        who = str(record.actor.get("name") or _actor_id(record) or "someone")

        async def step() -> IngestResult:
            stopped = await self.scheduler.request_cancel(
                target, f"stop from {who}", _actor_id(record)
            )
            await self._attempt(record, target, key, "cancel_requested" if stopped else "idle")
            if stopped:
                return await self._settle(record, "stop", None, target)
            return await self._settle(record, "drop", "not_addressed", target)

        return await self._with_retries(record, target, key, step)

    async def _with_retries(
        self,
        record: SignalRecord,
        target: TaskId | None,
        key: str,
        step: Callable[[], Awaitable[IngestResult | _Again]],
    ) -> IngestResult:
        """Run one keyed effect until it settles, at most ``1 + len(retry_delays)`` times.

        Out of tries on an ambiguous owner it escalates; out of tries on transient errors the
        signal stays pending, for ``resume_pending`` once the store is back.
        """
        again = _Again("not tried")
        for delay in (*self.retry_delays, None):
            try:
                outcome = await step()
            except Retryable as e:
                again = _Again(f"transient: {e}", transient=True)
                await self._attempt(record, target, key, "retryable")
            else:
                if isinstance(outcome, IngestResult):
                    return outcome
                again = outcome
            if delay is not None:
                await asyncio.sleep(delay)
        if again.transient:
            return _result(record)
        reason = f"{again.cause}; not starting a second owner"
        return await self._settle(record, "escalated", reason, target)

    # -- records --------------------------------------------------------------------------

    async def _attempt(
        self, record: SignalRecord, target: TaskId | None, key: str, outcome: str
    ) -> None:
        now = self.clock.now()
        await self.db.run(
            lambda s: store.add_attempt(
                s, record.signal_id, target_task_id=target, idempotency_key=key,
                outcome=outcome, now=now,
            )
        )

    async def _settle(
        self,
        record: SignalRecord,
        decision: Decision,
        reason: str | None,
        task_id: TaskId | None = None,
    ) -> IngestResult:
        signal_id = record.signal_id
        await self.db.run(lambda s: store.set_decision(s, signal_id, decision, reason, task_id))
        return IngestResult(signal_id, decision, reason, task_id)

    def _fresh(self, record: SignalRecord) -> _Fresh:
        forced = self.policy.forced_new(record.text)
        return _Fresh(
            objective_key=record.objective_key or record.thread_ref or record.signal_id,
            agent=self.policy.default_agent,
            message=record.text if forced is None else forced,
            decision="new_task",
        )

    def _spec(
        self, record: SignalRecord, fresh: _Fresh, follows: TaskId | None, key: str
    ) -> TaskSpec:
        return TaskSpec(
            agent=fresh.agent,
            message=fresh.message,
            origin_thread_ref=record.thread_ref,
            objective_key=fresh.objective_key,
            repo=self.policy.repo_for(record.provider, record.thread_ref),
            requested_by=_actor_id(record),
            follows_task_id=follows,
            # A root task's creation key: lets a resumed plan find the task it already made.
            child_key=key,
        )

    def _daemon(self, name: str) -> DaemonDefinition | None:
        return next((d for d in self.policy.daemons if d.daemon_id == name), None)


def _latest_ended(admission: Admission, objective_key: str) -> TaskId | None:
    state = admission.objectives.get(objective_key)
    ended = state.latest_terminal if state is not None else None
    return ended.task_id if ended is not None else None


def _facts(signal: Signal, provider: str, delivery_id: str) -> SignalFacts:
    return SignalFacts(
        provider=provider,
        delivery_id=delivery_id,
        dedupe_key=signal.dedupe_key,
        kind=signal.kind,
        thread_ref=signal.thread_ref,
        objective_key=signal.objective_key,
        actor=asdict(signal.actor),
        text=signal.text,
        received_at=signal.received_at,
    )


def _result(record: SignalRecord, *, duplicate: bool = False) -> IngestResult:
    if record.decision not in DECISIONS:
        raise ValueError(f"signal {record.signal_id} has unknown decision {record.decision!r}")
    return IngestResult(
        signal_id=record.signal_id,
        decision=cast(Decision, record.decision),
        reason=record.reason,
        task_id=record.task_id,
        duplicate=duplicate,
    )


def _actor_id(record: SignalRecord) -> str | None:
    actor_id = record.actor.get("id")
    return str(actor_id) if actor_id is not None else None


def _event_text(record: SignalRecord) -> str:
    return f"{record.text}\n\nsource: {record.thread_ref}" if record.thread_ref else record.text
