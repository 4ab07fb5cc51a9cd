"""The routing decision: which one owner a Signal goes to, as a pure function.

``decide(signal, view, policy)`` reads only its arguments. Admission (``routing/admission.py``)
takes the snapshot (``RoutingView``) in the same transaction that stores the Signal, and the
effects (``routing/effects.py``) perform the returned Route and record what happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from routing.daemons import DaemonDefinition, matching_daemons
from routing.policy import RoutingPolicy
from routing.repos import Chosen, Refused, Undecided, picked_of, without_directives
from routing.signal import (
    FAILED_CONCLUSIONS,
    DropReason,
    Signal,
)
from runtime.answers import ANSWER_BUTTONS, APPROVE_REACTIONS
from runtime.ids import SignalId, TaskId
from runtime.store.records import Task, TaskStatus
from runtime.threads import ThreadRef

# Kinds that review a pull request: on a linked one they need no mention.
_REVIEW_KINDS = frozenset({"review_comment", "review"})
# Kinds in which a message sits in a conversation that may already have an owner.
_REPLY_KINDS = frozenset({"thread_reply", "issue_comment", "review_comment"})


@dataclass(frozen=True, slots=True)
class TaskView:
    """What routing knows about a task when it decides."""

    task_id: TaskId
    status: TaskStatus
    origin_thread_ref: ThreadRef | None = None
    objective_key: str | None = None
    requested_by: str | None = None
    repo: str | None = None

    @classmethod
    def of(cls, task: Task) -> TaskView:
        return cls(
            task_id=task.task_id,
            status=task.status,
            origin_thread_ref=task.origin_thread_ref,
            objective_key=task.objective_key,
            requested_by=task.requested_by,
            repo=task.repo,
        )


_NO_DAEMON_TASKS: Mapping[str, TaskView] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RoutingView:
    """The snapshot a decision is made on.

    ``active_task`` is the live owner of the signal's objective key; ``latest_task`` the most
    recent task of that objective if it is terminal (a follow-up "follows" it);
    ``daemon_tasks`` the live task of each daemon, by daemon id.
    """

    active_task: TaskView | None = None
    latest_task: TaskView | None = None
    is_duplicate: bool = False
    ci_followups: int = 0  # failed checks of linked pull requests that reached the objective
    daemon_tasks: Mapping[str, TaskView] = field(default_factory=lambda: _NO_DAEMON_TASKS)


@dataclass(frozen=True, slots=True)
class Append:
    task: TaskView
    key: str


@dataclass(frozen=True, slots=True)
class NewTask:
    """``where`` is the repository the request chose; None: its thread's (``repo_for``)."""

    objective_key: str
    message: str
    agent: str = "default"
    follows: TaskView | None = None
    where: Chosen | None = None


@dataclass(frozen=True, slots=True)
class AskRepo:
    """A new task whose repository nothing decides: ask the thread, and start it once a
    person who may answer has picked one (``ChooseRepo``)."""

    objective_key: str
    message: str
    agent: str = "default"
    follows: TaskView | None = None
    branch: str | None = None


@dataclass(frozen=True, slots=True)
class ChooseRepo:
    """A pick under the question signal ``question`` asked; ``repo`` None: no repository."""

    question: SignalId
    repo: str | None


@dataclass(frozen=True, slots=True)
class Drop:
    reason: DropReason
    detail: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Daemon:
    """A daemon owns the event: append to its live task, or start its next activation."""

    name: str
    agent: str
    objective_key: str
    task: TaskView | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    task: TaskView


Route = Append | NewTask | AskRepo | ChooseRepo | Drop | Daemon | Stop


def decide(signal: Signal, view: RoutingView, policy: RoutingPolicy) -> Route:
    if signal.linked and signal.ci is not None:
        # A check on the head of a pull request a task opened: that task's, even though our
        # own push caused it.
        return _linked_check(signal, view, policy)
    # Never answer ourselves: our own posts, pushes and CI runs come back as events.
    if policy.caused_by_us(signal):
        return Drop("self_generated", "caused by us")
    if view.is_duplicate:
        return Drop("duplicate", f"fact {signal.dedupe_key} already stored")
    unroutable = _unroutable_kind(signal)
    if unroutable is not None:
        return unroutable
    daemons = matching_daemons(signal, policy.daemons)
    if daemons:
        return _to_daemon(daemons[0], view)
    route = _for_person(signal, view, policy)
    # Asked only of a signal that would act: "unauthorised" names someone refused, while a
    # remark nobody addressed to us stays "not_addressed" whoever wrote it.
    if not isinstance(route, Drop) and not policy.is_authorised(signal):
        return Drop("unauthorised", f"{signal.provider} actor {signal.actor.name}")
    return route


def _unroutable_kind(signal: Signal) -> Drop | None:
    match signal.kind:
        case "edit":
            return Drop("edited", "edits do not re-run a request")
        case "other":
            return Drop("unsupported", "kind other")
        case _:
            return None


def _to_daemon(daemon: DaemonDefinition, view: RoutingView) -> Daemon:
    return Daemon(
        name=daemon.daemon_id,
        agent=daemon.agent,
        objective_key=daemon.objective_key,
        task=view.daemon_tasks.get(daemon.daemon_id),
    )


def _for_person(signal: Signal, view: RoutingView, policy: RoutingPolicy) -> Route:
    active = view.active_task
    if policy.is_stop(signal):
        if active is None:
            return Drop("not_addressed", "stop with no active task")
        return Stop(active)
    if is_answer(signal):
        # ✅, or a click on Approve / Reject (or Continue under a budget's question): the
        # waiting task reads it as a reply.
        if active is None:
            return Drop("not_addressed", f"{signal.text} with no active task")
        return Append(active, key=signal.dedupe_key)
    picked = picked_of(signal.text) if signal.kind == "action" else None
    if picked is not None:
        return ChooseRepo(picked.question, picked.repo)
    if signal.kind in ("reaction", "action"):
        return Drop("not_addressed", f"a {signal.kind} is not a request")
    # A review on a pull request a task opened is for that task, mention or not.
    review = signal.linked and signal.kind in _REVIEW_KINDS
    joins = active is not None and (review or _joins(signal, active, policy))
    if not (signal.addresses_bot or joins or review):
        return Drop("not_addressed", f"{signal.kind} without a mention")
    forced = policy.forced_new(signal.text)
    if forced is not None:
        return _forced_new(signal, forced, active, policy)
    if active is not None and joins:
        return Append(active, key=signal.dedupe_key)
    return _new_task(signal, signal.objective_key, signal.text, view.latest_task, policy)


def _forced_new(
    signal: Signal, message: str, active: TaskView | None, policy: RoutingPolicy
) -> NewTask | AskRepo | Drop:
    # Same thread, separate objective: the key gets a suffix so later replies keep joining
    # the thread's existing owner rather than colliding with it.
    objective = signal.objective_key
    if active is not None:
        objective = f"{objective}+{signal.dedupe_key}"
    return _new_task(signal, objective, message, None, policy)


def _new_task(
    signal: Signal, objective: str, text: str, follows: TaskView | None, policy: RoutingPolicy
) -> NewTask | AskRepo | Drop:
    """A new owner for the request, in the repository it chose (or its predecessor's), or
    the question which one, or the refusal of one Keel may not reach."""
    choice = policy.repo_choice(signal.thread_ref, text, follows.repo if follows else None)
    message = without_directives(text) if choice is not None else text
    repo = choice.repo if isinstance(choice, Chosen) else None
    agent = policy.agent_for(signal.thread_ref, _who(signal), message, repo)
    match choice:
        case Refused():
            return Drop("repo_refused", "a repository Keel does not reach")
        case Undecided(branch=branch):
            return AskRepo(objective, agent.message, agent.agent, follows, branch)
        case Chosen() | None:
            return NewTask(objective, agent.message, agent.agent, follows, where=choice)


def _joins(signal: Signal, task: TaskView, policy: RoutingPolicy) -> bool:
    if signal.addresses_bot:
        return True
    origin = task.origin_thread_ref
    same = origin is not None and signal.thread_ref.root == origin.root
    in_own_thread = signal.kind in _REPLY_KINDS and same
    return policy.join_thread_replies and in_own_thread


def _who(signal: Signal) -> tuple[str, str]:
    return (signal.actor.id, signal.actor.name)


def is_answer(signal: Signal) -> bool:
    """A reaction or click that answers a task's approval question."""
    if signal.kind == "reaction":
        return signal.reaction in APPROVE_REACTIONS
    if signal.kind == "action":
        return signal.text.split(" ", 1)[0] in ANSWER_BUTTONS
    return False


def _linked_check(signal: Signal, view: RoutingView, policy: RoutingPolicy) -> Route:
    """A failed check on a linked pull request's current head: one follow-up per (check,
    head SHA) (intake made that the fact, so a repeat is a duplicate); a pass is no news."""
    ci = signal.ci
    assert ci is not None
    if ci.app_id is not None and ci.app_id in policy.self_app_ids:
        return Drop("self_generated", "a check run by our app")
    if view.is_duplicate:
        return Drop("duplicate", f"{ci.name} already failed on this head")
    if ci.conclusion not in FAILED_CONCLUSIONS:
        return Drop("not_addressed", f"{ci.name}: {ci.conclusion}")
    if view.ci_followups >= policy.max_ci_fixes:
        return Drop("capped", f"{view.ci_followups} CI follow-ups already")
    if view.active_task is not None:
        return Append(view.active_task, key=signal.dedupe_key)
    return NewTask(
        objective_key=signal.objective_key,
        message=signal.text,
        agent=policy.agent_for(signal.thread_ref, _who(signal), "").agent,
        follows=view.latest_task,
    )
