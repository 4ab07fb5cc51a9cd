"""The phase table: for every phase of a run, the function that runs it and the phases that may
follow it. This is where to start reading the executor.

The edges are declared twice on purpose, once for each reader: ``next`` here for the runner,
which refuses a transition the table does not allow, and each function's return type
(``Transition[Literal[...]]``) for mypy, which refuses a misspelt phase or an undeclared
successor. A unit test holds the two to the same edges.

Any phase may also go to ``ON_ERROR`` (``report_failure``) when it raises, except the two
phases of last resort, whose failure is the tick's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from runtime.execution import ON_ERROR, Phase
from runtime.executor import approval, budget, dispatch, phases
from runtime.executor.context import ExecutorContext, Transition
from runtime.store.executions import Run
from runtime.store.records import Task

PhaseFn = Callable[[Run, Task, ExecutorContext], Awaitable[Transition[Phase]]]


@dataclass(frozen=True, slots=True)
class Step:
    run: PhaseFn
    next: frozenset[Phase]


def _step(run: PhaseFn, *following: Phase) -> Step:
    return Step(run, frozenset(following))


TABLE: Mapping[Phase, Step] = {
    "load_context": _step(phases.load_context, "check_scheduler"),
    "check_scheduler": _step(
        phases.check_scheduler, "call_model", "report_stopped", "report_failure"
    ),
    # call_model again after a compaction's summary; await_budget when a budget is spent.
    "call_model": _step(
        phases.call_model,
        "dispatch_tools", "report_terminal", "check_scheduler", "report_failure",
        "call_model", "await_budget",
    ),
    "await_budget": _step(
        budget.await_budget, "await_budget", "check_scheduler", "report_failure", "report_stopped"
    ),
    "dispatch_tools": _step(
        dispatch.dispatch_tools, "dispatch_tools", "await_tools", "await_approval"
    ),
    # A call that needs a person's approval: parked until the answer, then dispatched.
    "await_approval": _step(approval.await_approval, "await_approval", "dispatch_tools"),
    "await_tools": _step(dispatch.await_tools, "await_tools", "advance_turn"),
    # The name older rows have for await_tools.
    "waiting": _step(dispatch.await_tools, "await_tools", "advance_turn"),
    "advance_turn": _step(
        dispatch.advance_turn, "check_scheduler", "report_stopped", "report_failure"
    ),
    "report_terminal": _step(phases.report_terminal, "check_scheduler", "await_input", "done"),
    "await_input": _step(
        phases.await_input, "await_input", "check_scheduler", "report_stopped", "done"
    ),
    "report_failure": _step(phases.report_failure, "done"),
    "report_stopped": _step(phases.report_stopped, "done"),
    "done": _step(phases.done, "done"),
}

LAST_RESORT: frozenset[Phase] = frozenset({"report_failure", "done"})


def may_follow(current: Phase, following: Phase) -> bool:
    """Whether the table lets ``following`` come after ``current``."""
    if following == ON_ERROR and current not in LAST_RESORT:
        return True
    return following in TABLE[current].next
