"""Keel built from a config tree, as an operator starts it, with the scripted model: one task
run to its end over a configured repository, and the scan that says which tables hold a
string afterwards (for proofs that a token left no trail)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import inspect, text

from adapters.assembly import Keel
from adapters.config import build_config
from runtime.store.engine import Database
from runtime.store.records import Task, TaskSpec


def scripted_keel(
    folder: Path, db_url: str, turns: list[dict[str, Any]], repositories: dict[str, Any]
) -> Keel:
    """Keel whose model plays ``turns`` and whose workspaces (under ``folder``/ws, no sandbox)
    know ``repositories``."""
    (folder / "script.yaml").write_text(yaml.safe_dump({"scripts": [{"turns": turns}]}))
    tree = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(folder / "script.yaml")},
        "workspace": {"root": str(folder / "ws"), "sandbox": "none", "repositories": repositories},
        "worker": {"concurrency": 1, "poll_interval_s": 0.05},
    }
    return Keel(build_config(tree, env={}))


async def run_one(keel: Keel, spec: TaskSpec, timeout_s: float) -> Task | None:
    """Starts ``keel``, runs ``spec`` and stops it again; the task as last seen: terminal, or
    not if ``timeout_s`` ran out first."""
    await keel.connect()
    await keel.start()
    try:
        task = (await keel.scheduler.transact(keel.scheduler.schedule, spec)).task
        current = None
        for _ in range(round(timeout_s / 0.05)):
            current = await keel.scheduler.get(task.task_id)
            if current is not None and current.status.is_terminal:
                break
            await asyncio.sleep(0.05)
        return current
    finally:
        await keel.stop()


def rows_containing(db_url: str, needle: str) -> list[str]:
    """The table of each row that holds ``needle`` in any column."""
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
