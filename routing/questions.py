"""The repository question: a request nothing assigns a repository to is held, as its pending
Signal, while the thread is asked which repository to work in; a pick starts its task there.

No task exists until the answer: the question is the request's Signal, stored ``pending``
with its plan (``AskRepo``), so it survives a restart, and the task is scheduled under that
Signal's creation key when a person who may answer picks an option, so a repeated or
concurrent pick finds the task the first one made. Each pass of the intake's retry loop
looks at the open questions again (``Effects.apply_in``): one whose time is up ends with a
reply that says why, and is settled so it is never asked again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from routing.outcome import Ledger
from routing.plan import BadPlan, from_plan
from routing.policy import RoutingPolicy
from routing.repos import (
    MAX_OPTIONS,
    MAX_VALUE,
    NO_REPO,
    answer_text,
    answered_text,
    choice_name,
    expired_text,
    question_text,
    unanswered_text,
)
from routing.result import IngestResult
from routing.router import AskRepo, ChooseRepo
from runtime.clock import Clock
from runtime.ids import SignalId, TaskId
from runtime.scheduler import Scheduler
from runtime.store import outbox
from runtime.store import signals as store
from runtime.store.engine import Transaction
from runtime.store.records import TaskSpec
from runtime.store.signals import PENDING, SignalRecord
from runtime.surfaces import Action

# The reasons an asked request is settled with: picked by someone, or nobody in time.
CHOSEN_BY = "repository chosen by "
UNANSWERED = "no repository chosen in time"


def creation_key(signal_id: str) -> str:
    """The child key a signal's new task is scheduled under: a second run finds that task."""
    return f"signal:{signal_id}"


def question_key(signal_id: str) -> str:
    return f"repo-question:{signal_id}"


class RepoQuestions:
    def __init__(
        self, scheduler: Scheduler, policy: RoutingPolicy, ledger: Ledger, clock: Clock
    ) -> None:
        self.scheduler = scheduler
        self.policy = policy
        self.ledger = ledger
        self.clock = clock

    def ask_in(self, session: Transaction, record: SignalRecord, ask: AskRepo) -> IngestResult:
        """Ask once (the post is keyed by the Signal); end the request when time is up."""
        made = store.task_created_under(session, creation_key(record.signal_id))
        if made is not None:
            return self.ledger.settle_in(session, record, "new_task", None, made.task_id)
        thread = record.thread_ref.root if record.thread_ref else None
        if thread is None:
            return self.ledger.settle_in(session, record, "drop", "not_addressed")
        now = self.clock.now()
        if now >= self._deadline(record):
            seconds = self.policy.repo_question_s
            outbox.enqueue_post(
                session,
                task_id="",
                purpose="refusal",
                thread=thread,
                key=f"repo-expired:{record.signal_id}",
                action="post",
                body=expired_text(seconds),
                now=now,
            )
            ended = unanswered_text(self._asked(record))
            outbox.set_body(session, question_key(record.signal_id), ended, ())
            return self.ledger.settle_in(session, record, "drop", UNANSWERED)
        outbox.enqueue_post(
            session,
            task_id="",
            purpose="approval",
            thread=thread,
            key=question_key(record.signal_id),
            action="post",
            body=self._asked(record),
            now=now,
            actions=self._options(record.signal_id),
        )
        return IngestResult(record.signal_id, PENDING, "repo_question", None)

    def choose_in(
        self, session: Transaction, record: SignalRecord, pick: ChooseRepo
    ) -> IngestResult:
        """Start the asked request in the picked repository, if the pick still counts. The
        question's row is locked first: two picks at once (two processes) are decided one
        after the other, and the second finds the question answered."""
        asked = store.get_signal(session, pick.question, lock=True)
        if asked is None or not _same_thread(asked, record):
            return self.ledger.settle_in(session, record, "drop", "not_addressed")
        ended = _ended(asked)
        if ended is not None:
            return self.ledger.settle_in(session, record, "drop", ended, asked.task_id)
        ask = _question(asked)
        if ask is None or asked.decision != PENDING:
            return self.ledger.settle_in(session, record, "drop", "not_addressed")
        if self.clock.now() >= self._deadline(asked):
            return self.ledger.settle_in(session, record, "drop", "expired")
        if pick.repo is not None and pick.repo not in self._offerable():
            return self.ledger.settle_in(session, record, "drop", "not_offered")
        task_id = self._start_in(session, asked, ask, pick.repo)
        self.ledger.attempt_in(session, record, task_id, creation_key(asked.signal_id), "chosen")
        who = (record.actor.name or record.actor.id) if record.actor else "someone"
        chosen_by = f"{CHOSEN_BY}{who}"
        store.set_decision(session, asked.signal_id, "new_task", chosen_by, task_id)
        body = answered_text(self._asked(asked), who, pick.repo)
        outbox.set_body(session, question_key(asked.signal_id), body, ())
        chosen = pick.repo or "no repository"
        return self.ledger.settle_in(session, record, "new_task", f"chose {chosen}", task_id)

    def _start_in(
        self, session: Transaction, asked: SignalRecord, ask: AskRepo, repo: str | None
    ) -> TaskId:
        spec = TaskSpec(
            agent=self._agent(asked, ask, repo),
            message=ask.message,
            origin_thread_ref=asked.thread_ref.root if asked.thread_ref else None,
            objective_key=ask.objective_key,
            repo=repo,
            requested_by=asked.actor.id if asked.actor else None,
            follows_task_id=ask.follows.task_id if ask.follows else None,
            child_key=creation_key(asked.signal_id),
        )
        return self.scheduler.schedule(session, spec).task.task_id

    def _agent(self, asked: SignalRecord, ask: AskRepo, repo: str | None) -> str:
        """The repository's agent (``routing.repo_agents``), unless the request named one."""
        thread = asked.thread_ref
        if ask.agent != self.policy.agent_for(thread, (), "").agent:
            return ask.agent
        return self.policy.agent_for(thread, (), "", repo).agent

    def _deadline(self, record: SignalRecord) -> datetime:
        return record.received_at + timedelta(seconds=self.policy.repo_question_s)

    def _offerable(self) -> frozenset[str]:
        reach = self.policy.reach
        return frozenset(reach.offered()) if reach is not None else frozenset()

    def _asked(self, record: SignalRecord) -> str:
        who = (record.actor.name or record.actor.id) if record.actor else "there"
        return question_text(who, self.policy.repo_question_s)

    def _options(self, question: SignalId) -> tuple[Action, ...]:
        """One select: every repository Keel offers, then "no repository". Past what one
        select lists the options are searched, so the post keeps no more than shows that."""
        name = choice_name(question)
        repos = sorted(self._offerable(), key=str.lower)[:MAX_OPTIONS]
        return (
            *(Action(name=name, label=repo, value=repo) for repo in repos),
            Action(name=name, label="No repository", value=NO_REPO),
        )


def offered_options(policy: RoutingPolicy, name: str, typed: str) -> list[tuple[str, str]]:
    """(label, value) of a repository question's options whose name contains ``typed``:
    at most ``MAX_OPTIONS``, "no repository" first. Nothing for a choice that is not one."""
    if answer_text(name, NO_REPO) is None or policy.reach is None:
        return []
    needle = typed.strip().lower()
    found = [r for r in policy.reach.offered() if needle in r.lower() and len(r) <= MAX_VALUE]
    return [("No repository", NO_REPO), *((r, r) for r in found[: MAX_OPTIONS - 1])]


def _ended(asked: SignalRecord) -> str | None:
    """Why a pick under ``asked`` comes too late, if its question was settled already."""
    if asked.decision == "new_task" and (asked.reason or "").startswith(CHOSEN_BY):
        return "answered"
    if asked.decision == "drop" and asked.reason == UNANSWERED:
        return "expired"
    return None


def _question(record: SignalRecord | None) -> AskRepo | None:
    if record is None or record.plan is None:
        return None
    try:
        route = from_plan(record.plan)
    except BadPlan:
        return None
    return route if isinstance(route, AskRepo) else None


def _same_thread(asked: SignalRecord, record: SignalRecord) -> bool:
    """A pick answers only the question asked in its own thread."""
    return (
        asked.thread_ref is not None
        and record.thread_ref is not None
        and asked.thread_ref.root == record.thread_ref.root
    )
