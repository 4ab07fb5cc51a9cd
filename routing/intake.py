"""Intake: what happens to a webhook, from a Signal to its effect and its acknowledgement.

``Router.ingest`` stores the Signal, decides it (``routing.router.decide``) and carries the
decision out in **one transaction**: the task it starts, the mailbox message it appends or the
stop it records, the RouteAttempt, the final decision and the outbox row of the 👀 (or of the
escalation) commit together or not at all. On SQLite concurrent webhooks share that commit
through the group committer.

When the effect cannot settle in that transaction (the store refused it, or the target
answers ambiguously) the transaction is abandoned and the Signal is stored ``pending`` with
its plan, the serialised Route. The same code then carries the plan out, one transaction per
try, and ``resume_pending`` does so after a crash, so a resumed plan gets its 👀 too. Every
effect is keyed (mailbox key, creation key, cancel is idempotent): a second run converges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal, assert_never, cast, get_args

from routing.daemons import DaemonDefinition, matching_daemons
from routing.permissions import PermissionSource, needs_permission, with_permission
from routing.plan import BadPlan, from_plan, label, to_plan
from routing.policy import RoutingPolicy
from routing.router import (
    Append,
    Daemon,
    Drop,
    NewTask,
    Route,
    RoutingView,
    Stop,
    TaskView,
    decide,
)
from routing.signal import FAILED_CONCLUSIONS, Ignored, Signal
from runtime.clock import Clock, SystemClock
from runtime.errors import KeelError, Retryable
from runtime.executor.budget import answer_of
from runtime.executor.faults import FaultPlan
from runtime.ids import SignalId, TaskId
from runtime.reporting import ReportingPolicy, enqueue_ack
from runtime.scheduler import AlreadyTerminal, Appended, Duplicate, NotFound, Scheduler
from runtime.store import links
from runtime.store import signals as store
from runtime.store.engine import Database, Transaction, UniqueViolation
from runtime.store.outbox import enqueue_post
from runtime.store.records import TaskSpec
from runtime.store.signals import PENDING, Admission, SignalFacts, SignalRecord, Verdict
from runtime.threads import GitHubCommit, GitHubIssue, SlackThread, ThreadRef, text_of

log = logging.getLogger(__name__)

Decision = Literal["append", "new_task", "drop", "daemon", "stop", "escalated", "pending"]
DECISIONS: frozenset[str] = frozenset(get_args(Decision))
# Decisions that put work in a task's hands, and so are acknowledged on the thread.
ACKNOWLEDGED: frozenset[Decision] = frozenset({"new_task", "append", "stop"})
ReadBack = Literal["missing", "terminal", "active"]


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


class _Unsettled(Exception):
    """Abandons the admitting transaction: the plan is stored pending and carried out apart."""


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
        permissions: PermissionSource | None = None,
        retry_delays: tuple[float, ...] = (0.05, 0.2, 0.5),
        faults: FaultPlan | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.db = db
        self.policy = policy
        self.clock = clock or SystemClock()
        self.reporting = reporting
        self.permissions = permissions
        self.retry_delays = retry_delays
        self.faults = faults or FaultPlan.from_env()
        self._locks = ObjectiveLocks()

    # -- entry points ---------------------------------------------------------------------

    async def ingest(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult:
        """Store, decide and apply one delivery; a redelivery returns what the first became."""
        if isinstance(outcome, Ignored):
            return await self._ingest_ignored(outcome, provider, delivery_id, raw_kind)
        signal = await self._in_its_thread(outcome)
        signal = await self._with_permission(await self._in_its_objective(signal))
        facts = _facts(signal, provider, delivery_id)
        daemons = matching_daemons(signal, self.policy.daemons)
        keys = (signal.objective_key, *(d.objective_key for d in daemons))

        def choose(admission: Admission) -> Verdict:
            return self._verdict(signal, admission)

        self.faults.hit("intake:received")
        async with self._locks.hold(keys):
            try:
                result = await self.db.run(lambda s: self._intake(s, facts, keys, choose, signal))
            except Exception:  # the effect did not settle here: store the plan, then apply it
                admitted = await self.db.run(lambda s: store.admit(s, facts, keys, choose))
                self.faults.hit("intake:planned")
                if isinstance(admitted, store.Redelivered):
                    return _result(admitted.record, duplicate=True)
                if admitted.record.decision != PENDING:
                    return _result(admitted.record)
                return await self._carry_out(admitted.record)
        self.faults.hit("intake:committed")
        if result.decision != "drop":
            self.scheduler.wake()
        return result

    async def _with_permission(self, signal: Signal) -> Signal:
        """The asker's repository permission, when a policy threshold depends on it."""
        if self.permissions is None or signal.repo is None or not needs_permission(signal):
            return signal
        try:
            found = await self.permissions.permission(signal.repo, signal.actor.name)
        except KeelError as e:
            log.warning("permission of %s on %s unknown: %s", signal.actor.name, signal.repo, e)
            return signal
        return with_permission(signal, found)

    async def _in_its_thread(self, signal: Signal) -> Signal:
        """A reaction or click names one message, which may be anywhere in a thread (the
        mention, our progress message): it acts on the thread that message belongs to."""
        item = signal.message or signal.thread_ref
        if signal.kind not in ("reaction", "action") or not isinstance(item, SlackThread):
            return signal
        owner = await self.db.read(lambda s: store.owner_of_message(s, item))
        thread = owner[1].root if owner is not None else None
        if owner is None or not isinstance(thread, SlackThread):
            return signal  # the root itself, or a message Keel knows nothing of
        return replace(
            signal,
            objective_key=owner[0],
            thread_ref=thread,
            message=thread.message(item.target_ts),
        )

    async def _in_its_objective(self, signal: Signal) -> Signal:
        """A pull request a task opened, or a check on its current head, belongs to that
        task's objective. A check's fact is (check, head SHA): one follow-up per failing
        check and commit, however often it fails again there."""
        thread = signal.thread_ref
        match thread:
            case GitHubIssue(repo=repo, number=number):
                link = await self.db.read(lambda s: links.pull_link(s, repo, number))
            case GitHubCommit(repo=repo, sha=sha) if signal.ci is not None:
                link = await self.db.read(lambda s: links.link_of_head(s, repo, sha))
            case _:
                link = None
        if link is None:
            return signal
        pull = GitHubIssue(link.repo, link.number)
        linked = replace(signal, objective_key=link.objective_key, linked=pull)
        if signal.ci is not None:
            # Nobody can reply on a commit: the check's answers go to its pull request.
            linked = replace(linked, thread_ref=pull)
        if signal.ci is not None and signal.ci.conclusion in FAILED_CONCLUSIONS:
            fact = f"github:ci:{thread}:{signal.ci.name}:failed"
            linked = replace(linked, dedupe_key=fact)
        return linked

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

    def _intake(
        self,
        session: Transaction,
        facts: SignalFacts,
        keys: tuple[str, ...],
        choose: store.Choose,
        signal: Signal | None = None,
    ) -> IngestResult:
        """The request path's one transaction: admit, decide, apply, settle, acknowledge."""
        admitted = store.admit(session, facts, keys, choose)
        if isinstance(admitted, store.Redelivered):
            return _result(admitted.record, duplicate=True)
        record = admitted.record
        if record.decision != PENDING:
            self._refuse_in(session, record)
            if signal is not None and record.reason == "capped":
                self._capped_in(session, record, signal)
            return _result(record)
        outcome = self._apply_in(session, record, _route_of(record))
        if isinstance(outcome, _Again):
            raise _Unsettled(outcome.cause)
        return outcome

    # -- deciding -------------------------------------------------------------------------

    def _verdict(self, signal: Signal, admission: Admission) -> Verdict:
        route = decide(signal, self._view(signal, admission), self.policy)
        match route:
            case Drop(reason=reason):
                return Verdict("drop", reason)
            case Append(task=task) | Stop(task=task):
                return Verdict(PENDING, label(route), task.task_id, plan=to_plan(route))
            case NewTask(objective_key=objective, follows=follows):
                follows_id = follows.task_id if follows else None
                return Verdict(
                    PENDING,
                    label(route),
                    follows_id,
                    objective_key=objective,
                    plan=to_plan(route),
                )
            case Daemon(objective_key=objective, task=task):
                # No live activation: its ended one is the target, so the next one follows it.
                if task is None:
                    route = replace(route, task=_latest_ended(admission, objective))
                target = route.task.task_id if route.task else None
                return Verdict(
                    PENDING, label(route), target, objective_key=objective, plan=to_plan(route)
                )
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
            latest_task=(TaskView.of(own.latest_terminal) if own and own.latest_terminal else None),
            is_duplicate=admission.is_duplicate,
            ci_followups=own.ci_followups if own else 0,
            daemon_tasks=daemon_tasks,
        )

    # -- carrying out a stored plan -------------------------------------------------------

    async def _carry_out(self, record: SignalRecord) -> IngestResult:
        """Apply a pending plan, one transaction per try, at most ``1 + len(retry_delays)``.

        Out of tries on an ambiguous owner it escalates; out of tries on transient errors the
        signal stays pending, for ``resume_pending`` once the store is back.
        """
        try:
            route = _route_of(record)
        except BadPlan as e:
            return await self._settle(record, "escalated", str(e))
        target, key = _effect_key(record, route)
        again = _Again("not tried")
        for delay in (*self.retry_delays, None):
            try:
                outcome = await self.db.run(lambda s: self._apply_in(s, record, route))
            except (Retryable, UniqueViolation) as e:
                # A unique violation is a concurrent writer of the same key: the next try
                # finds what it wrote.
                cause = str(e) if isinstance(e, Retryable) else "concurrent write"
                again = _Again(f"transient: {cause}", transient=True)
                await self._attempt(record, target, key, "retryable")
            else:
                if isinstance(outcome, IngestResult):
                    self.faults.hit("intake:applied")
                    self.scheduler.wake()
                    return outcome
                again = outcome
            if delay is not None:
                await asyncio.sleep(delay)
        if again.transient:
            return _result(record)
        reason = f"{again.cause}; not starting a second owner"
        return await self._settle(record, "escalated", reason, target)

    # -- effects, each inside the caller's transaction ------------------------------------

    def _apply_in(
        self, session: Transaction, record: SignalRecord, route: Route
    ) -> IngestResult | _Again:
        match route:
            case Append(task=task):
                return self._append_in(session, record, task.task_id, self._fresh(record), "append")
            case NewTask(objective_key=objective, message=message, agent=agent, follows=follows):
                fresh = _Fresh(objective, agent, message, "new_task")
                return self._new_task_in(
                    session, record, fresh, follows=follows.task_id if follows else None
                )
            case Stop(task=task):
                return self._stop_in(session, record, task.task_id)
            case Daemon(name=name, task=task):
                daemon = self._daemon(name)
                if daemon is None:
                    gone = f"daemon {name!r} is gone"
                    return self._settle_in(session, record, "escalated", gone)
                text = _event_text(record)
                fresh = _Fresh(daemon.objective_key, daemon.task_agent, text, "daemon")
                if task is None:
                    return self._new_task_in(session, record, fresh, follows=None)
                # The target may be the role's ended task: the append is refused as
                # AlreadyTerminal and the successor starts linked to it.
                return self._append_in(session, record, task.task_id, fresh, "daemon")
            case Drop(reason=reason):
                return self._settle_in(session, record, "drop", reason)
            case _:
                assert_never(route)

    def _append_in(
        self,
        session: Transaction,
        record: SignalRecord,
        target: TaskId,
        fresh: _Fresh,
        decision: Decision,
    ) -> IngestResult | _Again:
        """Append under (target, dedupe key); fall back to a new owner only on proof."""
        key = record.dedupe_key
        text = _event_text(record) if decision == "daemon" else record.text
        parts = [{"type": "text", "text": text}, _sender_part(record)]
        outcome = self.scheduler.append_in(session, target, key, parts, _actor_id(record))
        match outcome:
            case Appended() | Duplicate():
                label = "appended" if isinstance(outcome, Appended) else "duplicate"
                self._attempt_in(session, record, target, key, label)
                return self._settle_in(session, record, decision, None, target)
            case AlreadyTerminal(status=status):
                self._attempt_in(session, record, target, key, f"already_terminal:{status}")
                return self._new_task_in(session, record, fresh, follows=target)
            case NotFound():
                state = self._read_back_in(session, target)
                self._attempt_in(session, record, target, key, f"not_found:{state}")
                if state in ("missing", "terminal"):
                    follows = target if state == "terminal" else None
                    return self._new_task_in(session, record, fresh, follows=follows)
                # Still active: a second owner would split the objective.
                return _Again(f"task {target} reads back {state} but refused the append")
            case _:
                assert_never(outcome)

    def _read_back_in(self, session: Transaction, task_id: TaskId) -> ReadBack:
        task = self.scheduler.get_in(session, task_id)
        if task is None:
            return "missing"
        return "terminal" if task.status.is_terminal else "active"

    def _new_task_in(
        self, session: Transaction, record: SignalRecord, fresh: _Fresh, *, follows: TaskId | None
    ) -> IngestResult:
        """Schedule under the creation key ``signal:{id}``; a task already made under it wins."""
        key = f"signal:{record.signal_id}"
        existing = store.task_created_under(session, key)
        if existing is not None:
            self._attempt_in(session, record, existing.task_id, key, "found_created")
            return self._settle_in(session, record, fresh.decision, None, existing.task_id)
        spec = self._spec(record, fresh, follows, key)
        task_id = self.scheduler.schedule_in(session, spec).task.task_id
        self._attempt_in(session, record, task_id, key, "scheduled")
        reason = f"follows {follows}" if follows else None
        return self._settle_in(session, record, fresh.decision, reason, task_id)

    def _stop_in(self, session: Transaction, record: SignalRecord, target: TaskId) -> IngestResult:
        key = f"stop:{record.signal_id}"
        who = str(record.actor.get("name") or _actor_id(record) or "someone")
        stopped = self.scheduler.cancel_in(session, target, f"stop from {who}", _actor_id(record))
        self._attempt_in(session, record, target, key, "cancel_requested" if stopped else "idle")
        if stopped:
            return self._settle_in(session, record, "stop", None, target)
        return self._settle_in(session, record, "drop", "not_addressed", target)

    # -- records --------------------------------------------------------------------------

    def _attempt_in(
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

    async def _attempt(
        self, record: SignalRecord, target: TaskId | None, key: str, outcome: str
    ) -> None:
        await self.db.run(lambda s: self._attempt_in(s, record, target, key, outcome))

    def _settle_in(
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
        self._announce_in(session, record, result)
        return result

    async def _settle(
        self,
        record: SignalRecord,
        decision: Decision,
        reason: str | None,
        task_id: TaskId | None = None,
    ) -> IngestResult:
        result = await self.db.run(lambda s: self._settle_in(s, record, decision, reason, task_id))
        self.scheduler.wake()
        return result

    def _announce_in(
        self, session: Transaction, record: SignalRecord, result: IngestResult
    ) -> None:
        """The 👀 of an accepted signal (🛑 for a stop), or the escalation of one not taken."""
        if self.reporting is None or record.thread_ref is None:
            return
        thread = record.thread_ref.root
        now = self.clock.now()
        if result.decision in ACKNOWLEDGED and result.task_id is not None:
            enqueue_ack(
                session,
                self.reporting,
                task_id=result.task_id,
                signal_id=record.signal_id,
                # Where the person acted: the mention, the reply, the message reacted to.
                thread=_acted_on(record) or thread,
                now=now,
                emoji="octagonal_sign" if result.decision == "stop" else None,
            )
        elif result.decision == "escalated":
            enqueue_post(
                session,
                task_id=result.task_id or "",
                purpose="escalation",
                thread=thread,
                key=f"escalation:{record.signal_id}",
                action="post",
                body=_escalation_text(result.reason),
                now=now,
            )

    def _capped_in(self, session: Transaction, record: SignalRecord, signal: Signal) -> None:
        """Say once on the pull request that its CI keeps failing and Keel stopped trying."""
        if signal.linked is None or signal.ci is None or self.reporting is None:
            return
        cap = self.policy.max_ci_fixes
        enqueue_post(
            session,
            task_id=record.task_id or "",
            purpose="ci_cap",
            thread=signal.linked,
            key=f"ci-cap:{record.objective_key}",
            action="post",
            body=(
                f"CI still fails ({signal.ci.name}: {signal.ci.conclusion} on "
                f"{str(signal.thread_ref).rsplit('@', 1)[-1][:12]}). I have followed up on "
                f"{cap} failed check{'s' if cap != 1 else ''} on this pull request, the limit, "
                "so I am not trying again: it needs a person to look."
            ),
            now=self.clock.now(),
        )

    def _refuse_in(self, session: Transaction, record: SignalRecord) -> None:
        """A budget's ``continue`` typed by someone who may not start tasks is answered in
        the thread (a click on Continue is answered to the clicker alone by the adapter)."""
        refused = record.decision == "drop" and record.reason == "unauthorised"
        if not refused or record.kind == "action" or record.thread_ref is None:
            return
        if answer_of(record.text) != "continue" or self.reporting is None:
            return
        who = record.actor.get("name") or record.actor.get("id") or "someone"
        enqueue_post(
            session,
            task_id="",
            purpose="refusal",
            thread=record.thread_ref.root,
            key=f"refusal:{record.signal_id}",
            action="post",
            body=(
                f"Not continuing on {who}'s word: only people who may start tasks here can "
                "let a task spend more."
            ),
            now=self.clock.now(),
        )

    def _fresh(self, record: SignalRecord) -> _Fresh:
        """A follow-up whose owner is gone becomes the next task of the same objective."""
        who = (str(record.actor.get("id") or ""), str(record.actor.get("name") or ""))
        choice = self.policy.agent_for(record.thread_ref, who, record.text)
        return _Fresh(
            objective_key=record.objective_key or text_of(record.thread_ref) or record.signal_id,
            agent=choice.agent,
            message=choice.message,
            decision="new_task",
        )

    def _spec(
        self, record: SignalRecord, fresh: _Fresh, follows: TaskId | None, key: str
    ) -> TaskSpec:
        return TaskSpec(
            agent=fresh.agent,
            message=fresh.message,
            origin_thread_ref=record.thread_ref.root if record.thread_ref else None,
            objective_key=fresh.objective_key,
            repo=self.policy.repo_for(record.thread_ref),
            requested_by=_actor_id(record),
            follows_task_id=follows,
            # A root task's creation key: lets a resumed plan find the task it already made.
            child_key=key,
        )

    def _daemon(self, name: str) -> DaemonDefinition | None:
        return next((d for d in self.policy.daemons if d.daemon_id == name), None)


def _acted_on(record: SignalRecord) -> ThreadRef | None:
    """The message a person acted with, if known: the Slack mention, reply, reaction or
    click; the GitHub issue comment or review comment (an issue, a pull request or a review
    has none: its 👀 goes on the issue or pull request)."""
    message = record.message_ref
    return message if isinstance(message, SlackThread | GitHubIssue) else None


def _escalation_text(reason: str | None) -> str:
    return (
        "⚠️ I received this but could not safely attach it to the task already working "
        "here, and I will not start a second one. Please repeat it once that task has "
        f"replied. (reason: {reason})"
    )


def _route_of(record: SignalRecord) -> Route:
    if record.plan is None:
        raise BadPlan(f"pending signal {record.signal_id} has no plan")
    return from_plan(record.plan)


def _effect_key(record: SignalRecord, route: Route) -> tuple[TaskId | None, str]:
    """The target and idempotency key a try of ``route`` is recorded under."""
    match route:
        case Append(task=task):
            return task.task_id, record.dedupe_key
        case Stop(task=task):
            return task.task_id, f"stop:{record.signal_id}"
        case Daemon(task=task) if task is not None:
            return task.task_id, record.dedupe_key
        case _:
            return None, f"signal:{record.signal_id}"


def _latest_ended(admission: Admission, objective_key: str) -> TaskView | None:
    state = admission.objectives.get(objective_key)
    ended = state.latest_terminal if state is not None else None
    return TaskView.of(ended) if ended is not None else None


def _facts(signal: Signal, provider: str, delivery_id: str) -> SignalFacts:
    return SignalFacts(
        provider=provider,
        delivery_id=delivery_id,
        dedupe_key=signal.dedupe_key,
        kind=signal.kind,
        thread_ref=signal.thread_ref,
        objective_key=signal.objective_key,
        actor=signal.actor.as_dict(),
        text=signal.text,
        received_at=signal.received_at,
        message_ref=signal.message,
        url=signal.url,
    )


def _sender_part(record: SignalRecord) -> dict[str, Any]:
    """Who said a follow-up, and where: the worker renders it into the mailbox item."""
    return {
        "type": "sender",
        "provider": record.provider,
        "id": _actor_id(record),
        "name": record.actor.get("name"),
        "url": record.url,
        "message": text_of(record.message_ref),
    }


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
