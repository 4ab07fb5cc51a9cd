"""Run.state as a typed record, stored in the layout the free dict had."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runtime.execution import Activation, Failure, Limit, RunState

SINCE = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

# Rows as versions before the typed record wrote them.
LEGACY_ROWS: list[dict[str, Any]] = [
    {},
    {"system": "be brief"},
    {"system": "s", "model_retries": 3},
    {"system": "s", "limit": {"name": "max_turns", "value": 8}},
    {"system": "s", "error": {"phase": "call_model", "message": "model said no"}},
    {
        "system": "s",
        "error": {"phase": "dispatch_tools", "type": "KeyError", "message": "'x'", "trace": "T"},
    },
    {
        "system": "s",
        "activation": {"turn": 4, "since": SINCE.isoformat(), "tool_calls_before": 2},
        "idle_lifetime_s": 60.0,
        "last_answer": "done for now",
    },
    {
        "system": "s",
        "idle_until": SINCE.isoformat(),
        "idle_lifetime_s": 60.0,
        "last_answer": "parked",
    },
]


@pytest.mark.parametrize("row", LEGACY_ROWS)
def test_state_written_as_before_when_a_legacy_row_is_read_and_written(row: dict[str, Any]) -> None:
    assert RunState.from_json(row).to_json() == row


def test_fields_are_typed_when_a_legacy_row_is_read() -> None:
    state = RunState.from_json({**LEGACY_ROWS[6], "limit": {"name": "max_tool_calls", "value": 5}})

    assert state.activation == Activation(4, SINCE, 2)
    assert state.limit == Limit("max_tool_calls", 5)
    assert (state.idle_lifetime_s, state.last_answer) == (60.0, "done for now")
    assert state.idle_until is None


def test_failure_keeps_exception_type_under_its_stored_name_when_written() -> None:
    written = RunState(error=Failure("call_model", "boom", "ZeroDivisionError")).to_json()

    error = {"phase": "call_model", "message": "boom", "type": "ZeroDivisionError"}
    assert written == {"error": error}


def test_outage_start_survives_a_round_trip_when_a_run_waits_out_the_model_provider() -> None:
    written = RunState(model_retries=5, model_outage_since=SINCE).to_json()

    assert written == {"model_retries": 5, "model_outage_since": SINCE.isoformat()}
    assert RunState.from_json(written).model_outage_since == SINCE
