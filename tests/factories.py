"""Factories for test values: one place that knows sensible defaults."""

from __future__ import annotations

from typing import Any

from runtime.store.records import TaskSpec


def make_spec(**overrides: Any) -> TaskSpec:
    values: dict[str, Any] = {
        "agent": "default",
        "message": "fix the failing test",
        "origin_thread_ref": "slack:T1/C1/1700000000.000100",
        "objective_key": "slack:T1/C1/1700000000.000100",
    }
    values.update(overrides)
    return TaskSpec(**values)


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
