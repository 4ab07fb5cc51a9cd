"""The scale-out benchmark's worker (``bench.sleep_worker``) really offers its ``sleep`` tool to
the configured agent: when it did not, every benchmark task failed at once and the figures
measured failures (found after the agents refactor of #38)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from adapters.config import load_config
from bench.scaleout import write_config
from bench.sleep_worker import SleepKeel
from runtime.ids import new_task_id
from runtime.store import tasks as q
from runtime.store.records import TaskSpec


async def test_the_bench_worker_runs_a_task_that_calls_sleep(db_url: str, tmp_path: Path) -> None:
    keel = SleepKeel(load_config(str(write_config(tmp_path, db_url))))
    keel.effects = tmp_path / "effects.log"
    await keel.connect()
    await keel.start(workers=True, intake=False)
    try:
        task_id = new_task_id()
        now = datetime.now(UTC)
        await keel.db.run(
            lambda s: q.insert_task(s, task_id, TaskSpec(agent="default", message="go"), None, now)
        )
        async with asyncio.timeout(30):
            while True:
                task = await keel.db.read(lambda s: q.get_task(s, task_id))
                if task is not None and task.finished_at is not None:
                    break
                await asyncio.sleep(0.05)
    finally:
        await keel.stop()
    assert task.status == "succeeded", task
    assert keel.effects.read_text().split()[0] == task_id  # the tool ran, once
