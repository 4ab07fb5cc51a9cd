"""A repository token used for an HTTPS clone never lands in files, logs or the database."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from runtime.store.records import TaskSpec
from tests.integration.scripted_keel import rows_containing, run_one, scripted_keel

TOKEN = "tok-SECRET-1234567890"


async def test_https_token_appears_nowhere_when_a_task_clones(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_file", "args": {"path": "README.md"}}]},
        {"say": "done"},
    ]
    # A closed loopback port: the clone is attempted with the token and fails.
    repositories = {"remote": {"url": "https://127.0.0.1:9/acme/x.git", "token": TOKEN}}
    caplog.set_level(logging.DEBUG)
    keel = scripted_keel(tmp_path, db_url, turns, repositories)
    spec = TaskSpec(agent="default", message="read", repo="remote")
    current = await run_one(keel, spec, timeout_s=15)
    assert current is not None and current.status.is_terminal
    assert "clone" in str(current.result).lower()  # the clone really was attempted
    assert TOKEN not in caplog.text
    for path in (tmp_path / "ws").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert rows_containing(db_url, TOKEN) == []
