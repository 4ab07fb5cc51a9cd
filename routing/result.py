"""What became of one delivery: the decision a Signal ends with, as callers see it."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.ids import SignalId, TaskId
from runtime.store.signals import Decision, SignalRecord

__all__ = ["ACKNOWLEDGED", "Decision", "IngestResult", "result_of"]

# Decisions that put work in a task's hands, and so are acknowledged on the thread.
ACKNOWLEDGED: frozenset[Decision] = frozenset({"new_task", "append", "stop"})


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What became of one delivery. ``duplicate`` means this delivery was seen before."""

    signal_id: SignalId
    decision: Decision
    reason: str | None
    task_id: TaskId | None
    duplicate: bool = False


def result_of(record: SignalRecord, *, duplicate: bool = False) -> IngestResult:
    return IngestResult(
        signal_id=record.signal_id,
        decision=record.decision,
        reason=record.reason,
        task_id=record.task_id,
        duplicate=duplicate,
    )
