"""A repository token used for an HTTPS clone never lands in files, logs or the database."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import yaml
from sqlalchemy import inspect, text

from adapters.assembly import Keel
from adapters.config import build_config
from runtime.store.engine import Database
from runtime.store.records import TaskSpec

TOKEN = "tok-SECRET-1234567890"


async def test_https_token_appears_nowhere_when_a_task_clones(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [{"name": "read_file", "args": {"path": "README.md"}}]},
                    {"say": "done"},
                ]
            }
        ]
    }
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    tree = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {
            "root": str(tmp_path / "ws"),
            "sandbox": "none",
            # A closed loopback port: the clone is attempted with the token and fails.
            "repositories": {"remote": {"url": "https://127.0.0.1:9/acme/x.git", "token": TOKEN}},
        },
        "worker": {"concurrency": 1, "poll_interval_s": 0.05},
    }
    caplog.set_level(logging.DEBUG)
    keel = Keel(build_config(tree, env={}))
    await keel.connect()
    await keel.start()
    task = (
        await keel.scheduler.schedule(TaskSpec(agent="default", message="read", repo="remote"))
    ).task
    for _ in range(300):
        current = await keel.scheduler.get(task.task_id)
        if current is not None and current.status.is_terminal:
            break
        await asyncio.sleep(0.05)
    await keel.stop()
    assert current is not None and current.status.is_terminal
    assert "clone" in str(current.result).lower()  # the clone really was attempted
    assert TOKEN not in caplog.text
    for path in (tmp_path / "ws").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert _rows_containing(db_url, TOKEN) == []


def _rows_containing(db_url: str, needle: str) -> list[str]:
    db = Database.from_url(db_url)
    found: list[str] = []
    try:
        with db.engine.connect() as conn:
            for table in inspect(conn).get_table_names():
                for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                    if any(needle in str(value) for value in row):
                        found.append(table)
    finally:
        db.close()
    return found
