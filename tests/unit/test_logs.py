"""Structured logs: JSON lines with the task's ids, and secrets redacted."""

from __future__ import annotations

import json
import logging

from adapters.logs import JsonFormatter, register_secrets


def test_json_line_carries_ids_and_redacts_secrets_when_formatted() -> None:
    register_secrets(["xoxb-very-secret-token", None, "abc"])
    record = logging.LogRecord(
        "keel",
        logging.WARNING,
        __file__,
        1,
        "posting with %s failed",
        ("xoxb-very-secret-token",),
        None,
    )
    record.task_id = "t_1"
    record.phase = "call_model"
    line = json.loads(JsonFormatter().format(record))
    assert line["task_id"] == "t_1" and line["phase"] == "call_model"
    assert "xoxb-very-secret-token" not in line["message"] and "***" in line["message"]
    assert line["level"] == "warning"
