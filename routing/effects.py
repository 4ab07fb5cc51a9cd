"""Carrying a Route out inside the caller's transaction: the append, the new task or the stop
it asks for, each keyed so that a second run converges on the first one's effect."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, assert_never

from routing import reviews
from routing.daemons import DaemonDefinition
from routing.outcome import Ledger
from routing.policy import RoutingPolicy
from routing.questions import RepoQuestions, creation_key
from routing.repos import Chosen, without_directives
from routing.result import Decision, IngestResult
from routing.router import Append, AskRepo, ChooseRepo, Daemon, Drop, NewTask, Route, Stop
from runtime.ids import TaskId
from runtime.scheduler import AlreadyTerminal, Appended, Duplicate, NotFound, Scheduler
from runtime.store import signals as store
from runtime.store import tasks
from runtime.store.engine import Transaction
from runtime.store.records import SenderPart, TaskSpec, TextPart
from runtime.store.signals import SignalRecord
from runtime.threads import SlackThread, text_of

ReadBack = Literal["missing", "terminal", "active"]


@dataclass(frozen=True, slots=True)
class Again:
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
    where: Chosen | None = None


class Effects:
    def __init__(self, scheduler: Scheduler, policy: RoutingPolicy, ledger: Ledger) -> None:
        self.scheduler = scheduler
        self.policy = policy
        self.ledger = ledger
        self.questions = RepoQuestions(scheduler, policy, ledger, ledger.clock)

    def apply_in(
        self, session: Transaction, record: SignalRecord, route: Route
    ) -> IngestResult | Again:
        match route:
            case Append(task=task):
                return self._append_in(session, record, task.task_id, self._fresh(record), "append")
            case NewTask(objective_key=objective, message=message, agent=agent, follows=follows):
                message = self._as_review(record, message, route.where)
                agent = self._reviewing(record, message, agent)
                fresh = _Fresh(objective, agent, message, "new_task", route.where)
                return self._new_task_in(
                    session, record, fresh, follows=follows.task_id if follows else None
                )
            case AskRepo():
                return self.questions.ask_in(session, record, route)
            case ChooseRepo():
                return self.questions.choose_in(session, record, route)
            case Stop(task=task):
                return self._stop_in(session, record, task.task_id)
            case Daemon(name=name, task=task):
                daemon = self._daemon(name)
                if daemon is None:
                    gone = f"daemon {name!r} is gone"
                    return self.ledger.settle_in(session, record, "escalated", gone)
                text = _event_text(record)
                fresh = _Fresh(daemon.objective_key, daemon.task_agent, text, "daemon")
                if task is None:
                    return self._new_task_in(session, record, fresh, follows=None)
                # The target may be the role's ended task: the append is refused as
                # AlreadyTerminal and the successor starts linked to it.
                return self._append_in(session, record, task.task_id, fresh, "daemon")
            case Drop(reason=reason):
                return self.ledger.settle_in(session, record, "drop", reason)
            case _:
                assert_never(route)

    def _append_in(
        self,
        session: Transaction,
        record: SignalRecord,
        target: TaskId,
        fresh: _Fresh,
        decision: Decision,
    ) -> IngestResult | Again:
        """Append under (target, dedupe key); fall back to a new owner only on proof."""
        key = record.dedupe_key
        text = _event_text(record) if decision == "daemon" else record.text
        parts = (TextPart(text), _sender_part(record))
        outcome = self.scheduler.append_mailbox(session, target, key, parts, _actor_id(record))
        attempt_in = self.ledger.attempt_in
        match outcome:
            case Appended() | Duplicate():
                label = "appended" if isinstance(outcome, Appended) else "duplicate"
                attempt_in(session, record, target, key, label)
                return self.ledger.settle_in(session, record, decision, None, target)
            case AlreadyTerminal(status=status):
                attempt_in(session, record, target, key, f"already_terminal:{status}")
                return self._new_task_in(session, record, fresh, follows=target)
            case NotFound():
                state = self._read_back_in(session, target)
                attempt_in(session, record, target, key, f"not_found:{state}")
                if state in ("missing", "terminal"):
                    follows = target if state == "terminal" else None
                    return self._new_task_in(session, record, fresh, follows=follows)
                # Still active: a second owner would split the objective.
                return Again(f"task {target} reads back {state} but refused the append")
            case _:
                assert_never(outcome)

    def _read_back_in(self, session: Transaction, task_id: TaskId) -> ReadBack:
        task = tasks.get_task(session, task_id)
        if task is None:
            return "missing"
        return "terminal" if task.status.is_terminal else "active"

    def _new_task_in(
        self, session: Transaction, record: SignalRecord, fresh: _Fresh, *, follows: TaskId | None
    ) -> IngestResult:
        """Schedule under the creation key ``signal:{id}``; a task already made under it wins."""
        key = creation_key(record.signal_id)
        existing = store.task_created_under(session, key)
        if existing is not None:
            self.ledger.attempt_in(session, record, existing.task_id, key, "found_created")
            return self.ledger.settle_in(session, record, fresh.decision, None, existing.task_id)
        spec = self._spec(record, self._kept_in(session, fresh, follows), follows, key)
        task_id = self.scheduler.schedule(session, spec).task.task_id
        self.ledger.attempt_in(session, record, task_id, key, "scheduled")
        reason = f"follows {follows}" if follows else None
        return self.ledger.settle_in(session, record, fresh.decision, reason, task_id)

    def _kept_in(self, session: Transaction, fresh: _Fresh, follows: TaskId | None) -> _Fresh:
        """A person's follow-up stays in the repository of the task it follows, unless it
        chose one (a daemon's next activation goes where its event is)."""
        if fresh.where is not None or follows is None or fresh.decision != "new_task":
            return fresh
        before = tasks.get_task(session, follows)
        if before is None or before.repo is None:
            return fresh
        return replace(fresh, where=Chosen(before.repo))

    def _stop_in(self, session: Transaction, record: SignalRecord, target: TaskId) -> IngestResult:
        key = _stop_key(record)
        who = _actor_name(record) or _actor_id(record) or "someone"
        stopped = self.scheduler.request_cancel(
            session, target, f"stop from {who}", _actor_id(record)
        )
        outcome = "cancel_requested" if stopped else "idle"
        self.ledger.attempt_in(session, record, target, key, outcome)
        if stopped:
            return self.ledger.settle_in(session, record, "stop", None, target)
        return self.ledger.settle_in(session, record, "drop", "not_addressed", target)

    def _fresh(self, record: SignalRecord) -> _Fresh:
        """A follow-up whose owner is gone becomes the next task of the same objective."""
        who = (_actor_id(record) or "", _actor_name(record) or "")
        named = self.policy.repo_choice(record.thread_ref, record.text)
        where = named if isinstance(named, Chosen) else None
        # A refused or undecided choice leaves the words for the model to read.
        text = without_directives(record.text) if where is not None else record.text
        repo = where.repo if where is not None else None
        choice = self.policy.agent_for(record.thread_ref, who, text, repo)
        message = self._as_review(record, choice.message, where)
        return _Fresh(
            objective_key=record.objective_key or text_of(record.thread_ref) or record.signal_id,
            agent=self._reviewing(record, message, choice.agent),
            message=message,
            decision="new_task",
            where=where,
        )

    def _as_review(self, record: SignalRecord, message: str, where: Chosen | None) -> str:
        """A Slack "review <pull request link>" becomes that pull request's review request
        (its repository and head were chosen from the link); any other message as it is."""
        if not isinstance(record.thread_ref, SlackThread) or where is None:
            return message
        return reviews.linked_review(message, where.pull) or message

    def _reviewing(self, record: SignalRecord, message: str, agent: str) -> str:
        """A pull request's review request runs read-only, as the ``review`` agent."""
        return reviews.agent_for(message, record.thread_ref, agent)

    def _spec(
        self, record: SignalRecord, fresh: _Fresh, follows: TaskId | None, key: str
    ) -> TaskSpec:
        return TaskSpec(
            agent=fresh.agent,
            message=fresh.message,
            origin_thread_ref=record.thread_ref.root if record.thread_ref else None,
            objective_key=fresh.objective_key,
            repo=fresh.where.repo if fresh.where else self.policy.repo_for(record.thread_ref),
            requested_by=_actor_id(record),
            follows_task_id=follows,
            # A root task's creation key: lets a resumed plan find the task it already made.
            child_key=key,
        )

    def _daemon(self, name: str) -> DaemonDefinition | None:
        return next((d for d in self.policy.daemons if d.daemon_id == name), None)


def effect_key(record: SignalRecord, route: Route) -> tuple[TaskId | None, str]:
    """The target and idempotency key a try of ``route`` is recorded under."""
    match route:
        case Append(task=task):
            return task.task_id, record.dedupe_key
        case Stop(task=task):
            return task.task_id, _stop_key(record)
        case Daemon(task=task) if task is not None:
            return task.task_id, record.dedupe_key
        case ChooseRepo(question=question):
            return None, creation_key(question)
        case _:
            return None, creation_key(record.signal_id)


def _stop_key(record: SignalRecord) -> str:
    return f"stop:{record.signal_id}"


def _sender_part(record: SignalRecord) -> SenderPart:
    """Who said a follow-up, and where: the worker renders it into the mailbox item."""
    return SenderPart(
        provider=record.provider,
        sender_id=_actor_id(record),
        name=_actor_name(record),
        url=record.url,
        message=text_of(record.message_ref),
    )


def _actor_id(record: SignalRecord) -> str | None:
    return record.actor.id if record.actor else None


def _actor_name(record: SignalRecord) -> str | None:
    return record.actor.name if record.actor else None


def _event_text(record: SignalRecord) -> str:
    return f"{record.text}\n\nsource: {record.thread_ref}" if record.thread_ref else record.text
