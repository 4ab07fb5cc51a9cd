"""Helpers of the task-brief suites: a scripted model of our own, and reading back what the
model was given (the brief is the first transcript item; the model's first request is built
from the items before ``model:0:0``)."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from pathlib import Path
from typing import Any

from runtime.store import executions, transcripts
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.records import Task
from runtime.store.transcripts import TranscriptEntry
from tests.integration.keel_live import CHANNEL, Live

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(64))


def script(folder: Path, *turns: dict[str, Any]) -> dict[str, Any]:
    """Config that plays ``turns`` for every task (JSON is YAML)."""
    path = folder / "brief-script.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"scripts": [{"turns": list(turns)}]}))
    return {"model": {"script": str(path)}}


def slack_objective(live: Live, root_ts: str) -> str:
    return f"slack:{live.slack.team_id}/{CHANNEL}/{root_ts}"


async def finished(live: Live, objective: str, timeout: float = 90) -> Task:
    """The objective's task once it is terminal and its run is done."""
    db = Database.from_url(live.db_url)
    try:
        async with asyncio.timeout(timeout):
            while True:
                task = await db.read(lambda s: q.latest_by_objective(s, objective))
                if task is not None and task.status.is_terminal:
                    run = await db.read(partial(executions.load_run, task_id=task.task_id))
                    if run is not None and run.phase == "done":
                        return task
                await asyncio.sleep(0.1)
    finally:
        db.close()


async def transcript(live: Live, task_id: str) -> list[TranscriptEntry]:
    db = Database.from_url(live.db_url)
    try:
        return await db.read(lambda s: transcripts.transcript(s, task_id))
    finally:
        db.close()


def first_request(entries: list[TranscriptEntry]) -> list[TranscriptEntry]:
    """The items the first model call was built from."""
    keys = [e.item_key for e in entries]
    return entries[: keys.index("model:0:0")] if "model:0:0" in keys else entries


def failure(task: Task) -> str:
    return str((task.result or {}).get("summary", ""))
