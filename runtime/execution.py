"""A task's run as data: the names of the phases it moves through and the state it carries
from tick to tick. Which function runs each phase and which phase may follow which is the
phase table, ``runtime/executor/phase_table.py``.

``RunState`` is stored as JSON in ``executions.state``; its layout is the one the free dict
had (absent keys for unset fields), so rows written before it load unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

Phase = Literal[
    "load_context",
    "check_scheduler",
    "call_model",
    "dispatch_tools",
    "await_tools",
    "advance_turn",
    "report_terminal",
    "report_failure",
    "report_stopped",
    "waiting",
    "await_input",
    "await_approval",
    "await_budget",
    "done",
]

PHASES: frozenset[Phase] = frozenset(get_args(Phase))
FIRST_PHASE: Phase = "load_context"
# Where any phase goes when it raises (``phase_table.may_follow`` allows it from every phase
# but the last two): the failure is reported on the next tick.
ON_ERROR: Phase = "report_failure"


def phase_named(name: str) -> Phase | None:
    """The phase called ``name``, or None for a name this version does not know."""
    for phase in PHASES:
        if phase == name:
            return phase
    return None


# -- the state a run carries -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limit:
    """The agent limit that ended the run."""

    name: str
    value: int | float


@dataclass(frozen=True, slots=True)
class Failure:
    """What went wrong, for ``report_failure``; ``kind`` and ``trace`` when a phase raised."""

    phase: str
    message: str
    kind: str | None = None
    trace: str | None = None

    def to_json(self) -> dict[str, str]:
        found = {"phase": self.phase, "message": self.message}
        if self.kind is not None:
            found["type"] = self.kind
        if self.trace is not None:
            found["trace"] = self.trace
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        kind, trace = data.get("type"), data.get("trace")
        return cls(
            str(data.get("phase", "unknown phase")),
            str(data.get("message", "")),
            None if kind is None else str(kind),
            None if trace is None else str(trace),
        )


@dataclass(frozen=True, slots=True)
class Activation:
    """Where the current activation of a resident task began: limits count from here."""

    turn: int
    since: datetime
    tool_calls_before: int


@dataclass(frozen=True, slots=True)
class ApprovalAsk:
    """The question a call that needs approval is waiting on: only replies after mailbox
    item ``after`` answer it; ``body`` is what was asked (edited to say who answered)."""

    call_id: str
    name: str
    after: int
    body: str = ""


BudgetOutcome = Literal["budget_exhausted", "budget_stopped"]


@dataclass(frozen=True, slots=True)
class BudgetAsk:
    """The open budget question: how many budgets were granted before it, until when the
    answer is awaited, which budget was reached and the progress shown with the question."""

    grants: int
    until: datetime
    reached: str
    progress: str

    def to_json(self) -> dict[str, object]:
        return {"grants": self.grants, "until": self.until.isoformat(),
                "reached": self.reached, "progress": self.progress}

    @classmethod
    def from_json(cls, value: object) -> BudgetAsk | None:
        if not isinstance(value, dict) or "until" not in value:
            return None
        return cls(
            grants=int(value.get("grants", 0)),
            until=datetime.fromisoformat(str(value["until"])),
            reached=str(value.get("reached", "its budget")),
            progress=str(value.get("progress", "")),
        )


@dataclass(frozen=True, slots=True)
class BudgetEnd:
    """How a budget ended the run, for report_failure: no answer in time, or ``stop``."""

    outcome: BudgetOutcome
    summary: str

    def to_json(self) -> dict[str, object]:
        return {"outcome": self.outcome, "summary": self.summary}

    @classmethod
    def from_json(cls, value: object) -> BudgetEnd | None:
        if not isinstance(value, dict):
            return None
        # Anything but a stop reads back as exhausted: an ended budget is never a success.
        stopped = value.get("outcome") == "budget_stopped"
        outcome: BudgetOutcome = "budget_stopped" if stopped else "budget_exhausted"
        return cls(outcome, str(value.get("summary", "")))


@dataclass(frozen=True, slots=True)
class RunState:
    system: str | None = None  # the system prompt, once load_context has read it
    model_retries: int = 0  # consecutive transient model failures
    # When the model provider's current outage began for this run (its first failure since
    # the last answer): the run waits it out until ``outage_give_up_s`` after this.
    model_outage_since: datetime | None = None
    limit: Limit | None = None
    error: Failure | None = None
    activation: Activation | None = None
    # A resident task parked for its next event: until when, for how long each park lasts,
    # and its last answer (the last two stay after a wake, for the summary of the next park).
    idle_until: datetime | None = None
    idle_lifetime_s: float | None = None
    last_answer: str | None = None
    # Approval before writes: the open question, the calls of this turn approved so far, and
    # where the mailbox stood before the turn's first question (its replies are shown after).
    approval_ask: ApprovalAsk | None = None
    approved_calls: tuple[str, ...] = ()
    mailbox_replay_from: int | None = None
    # The context window (#16): characters per token as the provider's usage calibrated it;
    # a compaction asked for by a context-length refusal; refusals so far as (turn, count).
    chars_per_token: float | None = None
    compact_pending: bool = False
    context_overflows: tuple[int, int] | None = None
    # Budgets that ask (#16): budgets granted by ``continue``; the open question; how a
    # budget ended the run (outcome and summary, for report_failure).
    budget_grants: int = 0
    budget_ask: BudgetAsk | None = None
    budget_ended: BudgetEnd | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.system is not None:
            found["system"] = self.system
        if self.model_retries:
            found["model_retries"] = self.model_retries
        if self.model_outage_since is not None:
            found["model_outage_since"] = self.model_outage_since.isoformat()
        if self.limit is not None:
            found["limit"] = {"name": self.limit.name, "value": self.limit.value}
        if self.error is not None:
            found["error"] = self.error.to_json()
        if self.activation is not None:
            found["activation"] = {
                "turn": self.activation.turn,
                "since": self.activation.since.isoformat(),
                "tool_calls_before": self.activation.tool_calls_before,
            }
        if self.idle_until is not None:
            found["idle_until"] = self.idle_until.isoformat()
        if self.idle_lifetime_s is not None:
            found["idle_lifetime_s"] = self.idle_lifetime_s
        if self.last_answer is not None:
            found["last_answer"] = self.last_answer
        if self.approval_ask is not None:
            ask = self.approval_ask
            found["approval_ask"] = {
                "call_id": ask.call_id,
                "name": ask.name,
                "after": ask.after,
                "body": ask.body,
            }
        if self.approved_calls:
            found["approved_calls"] = list(self.approved_calls)
        if self.mailbox_replay_from is not None:
            found["mailbox_replay_from"] = self.mailbox_replay_from
        if self.chars_per_token is not None:
            found["chars_per_token"] = self.chars_per_token
        if self.compact_pending:
            found["compact_pending"] = True
        if self.context_overflows is not None:
            turn, count = self.context_overflows
            found["context_overflows"] = {"turn": turn, "count": count}
        if self.budget_grants:
            found["budget_grants"] = self.budget_grants
        if self.budget_ask is not None:
            found["budget_ask"] = self.budget_ask.to_json()
        if self.budget_ended is not None:
            found["budget_ended"] = self.budget_ended.to_json()
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunState:
        """Reads every layout this column has held; keys it does not know are left out."""
        system, limit, error = data.get("system"), data.get("limit"), data.get("error")
        until, lifetime, answer = (
            data.get("idle_until"), data.get("idle_lifetime_s"), data.get("last_answer")
        )
        return cls(
            system=None if system is None else str(system),
            model_retries=int(data.get("model_retries", 0)),
            model_outage_since=_moment(data.get("model_outage_since")),
            limit=Limit(str(limit["name"]), limit["value"]) if isinstance(limit, dict) else None,
            error=_failure(error),
            activation=_activation(data.get("activation")),
            idle_until=_moment(until),
            idle_lifetime_s=None if lifetime is None else float(lifetime),
            last_answer=None if answer is None else str(answer),
            approval_ask=_approval_ask(data.get("approval_ask")),
            approved_calls=tuple(str(c) for c in data.get("approved_calls") or ()),
            mailbox_replay_from=_int_or_none(data.get("mailbox_replay_from")),
            chars_per_token=_number(data.get("chars_per_token")),
            compact_pending=bool(data.get("compact_pending", False)),
            context_overflows=_overflows(data.get("context_overflows")),
            budget_grants=int(data.get("budget_grants", 0)),
            budget_ask=BudgetAsk.from_json(data.get("budget_ask")),
            budget_ended=BudgetEnd.from_json(data.get("budget_ended")),
        )


def _approval_ask(value: Any) -> ApprovalAsk | None:
    if not isinstance(value, dict) or "call_id" not in value:
        return None
    return ApprovalAsk(
        str(value["call_id"]),
        str(value.get("name", "")),
        int(value.get("after", 0)),
        str(value.get("body", "")),
    )


def _moment(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _overflows(value: Any) -> tuple[int, int] | None:
    if not isinstance(value, dict):
        return None
    return int(value.get("turn", 0)), int(value.get("count", 0))


def _failure(value: Any) -> Failure | None:
    if isinstance(value, dict):
        return Failure.from_json(value)
    return None if value is None else Failure("unknown phase", str(value))


def _activation(value: Any) -> Activation | None:
    if not isinstance(value, dict) or not isinstance(value.get("since"), str):
        return None
    return Activation(
        int(value.get("turn", 0)),
        datetime.fromisoformat(value["since"]),
        int(value.get("tool_calls_before", 0)),
    )
