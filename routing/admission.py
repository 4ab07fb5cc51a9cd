"""Admitting a Signal: the store's read, the one decision made on it, the store's write, in
the caller's transaction. A write that loses a unique key to a concurrent writer reads again
(the next read sees what that writer committed) and decides again on what it sees."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import assert_never

from routing.plan import label, to_plan
from routing.policy import RoutingPolicy
from routing.router import (
    Append,
    AskRepo,
    ChooseRepo,
    Daemon,
    Drop,
    NewTask,
    Route,
    RoutingView,
    Stop,
    TaskView,
    decide,
)
from routing.signal import Signal
from runtime.store import signals as store
from runtime.store.engine import Transaction
from runtime.store.signals import (
    PENDING,
    Admission,
    Redelivered,
    SignalFacts,
    SignalRecord,
    Verdict,
)

_TRIES = 3


@dataclass(frozen=True, slots=True)
class Decided:
    """The route chosen on an admission, and what the store keeps of it."""

    route: Route
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class Taken:
    """A Signal stored for the first time, with the route it was stored under."""

    record: SignalRecord
    route: Route


def admit_in(
    session: Transaction,
    facts: SignalFacts,
    objective_keys: Sequence[str],
    decide_on: Callable[[Admission], Decided],
) -> Taken | Redelivered:
    for _ in range(_TRIES):
        read = store.read_admission(session, facts, objective_keys)
        if isinstance(read, Redelivered):
            return read
        decided = decide_on(read)
        record = store.insert_signal(session, facts, read, decided.verdict)
        if record is not None:
            return Taken(record, decided.route)
    raise RuntimeError(f"signal {facts.provider}:{facts.delivery_id} kept conflicting")


def dropped(route: Drop) -> Decided:
    return Decided(route, Verdict("drop", route.reason))


def decided(signal: Signal, admission: Admission, policy: RoutingPolicy) -> Decided:
    """``decide`` on the admission's snapshot; a route with an effect is stored pending with
    its plan, so a crash before the effect settles leaves it for ``resume_pending``."""
    route = decide(signal, _view(signal, admission, policy), policy)
    match route:
        case Drop():
            return dropped(route)
        case Append(task=task) | Stop(task=task):
            return _pending(route, task.task_id)
        case (
            NewTask(objective_key=objective, follows=follows)
            | AskRepo(objective_key=objective, follows=follows)
        ):
            # A question stays pending until it is answered or its time is up.
            return _pending(route, follows.task_id if follows else None, objective)
        case ChooseRepo():
            return _pending(route, None)
        case Daemon(objective_key=objective, task=task):
            # No live activation: its ended one is the target, so the next one follows it.
            if task is None:
                route = replace(route, task=_latest_ended(admission, objective))
            target = route.task.task_id if route.task else None
            return _pending(route, target, objective)
        case _:
            assert_never(route)


def _pending(
    route: Append | NewTask | AskRepo | ChooseRepo | Daemon | Stop,
    target: str | None,
    objective: str | None = None,
) -> Decided:
    verdict = Verdict(PENDING, label(route), target, objective_key=objective, plan=to_plan(route))
    return Decided(route, verdict)


def _view(signal: Signal, admission: Admission, policy: RoutingPolicy) -> RoutingView:
    states = admission.objectives
    own = states.get(signal.objective_key)
    daemon_tasks = {
        daemon.daemon_id: TaskView.of(state.active)
        for daemon in policy.daemons
        if (state := states.get(daemon.objective_key)) and state.active
    }
    return RoutingView(
        active_task=TaskView.of(own.active) if own and own.active else None,
        latest_task=(TaskView.of(own.latest_terminal) if own and own.latest_terminal else None),
        is_duplicate=admission.is_duplicate,
        ci_followups=own.ci_followups if own else 0,
        daemon_tasks=daemon_tasks,
    )


def _latest_ended(admission: Admission, objective_key: str) -> TaskView | None:
    state = admission.objectives.get(objective_key)
    ended = state.latest_terminal if state is not None else None
    return TaskView.of(ended) if ended is not None else None
