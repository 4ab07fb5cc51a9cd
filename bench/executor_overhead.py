"""Executor overhead: phase transitions per second vs raw single-row commits per second.

Tasks of 10 turns x 3 instant tools run on the real executor and worker with the scripted
model. The baseline, measured in the same run on the same database and pragmas, is a loop of
one-row INSERT + COMMIT. Target: ratio >= 0.5 on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.common import PG_URL, Figure, median_figure, postgres_available
from runtime.clock import SystemClock
from runtime.config import AgentConfig, AgentLimits
from runtime.executor.context import ExecutorContext
from runtime.executor.runner import Runner, TickResult
from runtime.models.scripted import ScriptedProvider
from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from runtime.store.migrate import upgrade
from runtime.store.records import Lease, TaskSpec
from runtime.worker import Worker
from tests.tools import Instant

TURNS = 10
TOOLS_PER_TURN = 3
TASKS = 6
RUNS = 5


SCRIPT = {
    "scripts": [
        {
            "turns": [{"tool_calls": [{"name": "instant", "args": {}}] * TOOLS_PER_TURN}] * TURNS
            + [{"say": "done"}]
        }
    ]
}


@dataclass(frozen=True, slots=True)
class Rate:
    per_s: float
    cpu_ms_each: float  # this process's CPU time (all its threads) per commit or transition


def raw_commits_per_s(db: Database, seconds: float = 1.0) -> Rate:
    with db.engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS bench_rows (v TEXT)"))
    count = 0
    started, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        with db.transaction() as session:
            session.execute(text("INSERT INTO bench_rows (v) VALUES (:v)"), {"v": "x"})
        count += 1
    spent = time.process_time() - cpu
    return Rate(count / (time.perf_counter() - started), 1000 * spent / count)


class TimedRunner(Runner):
    """Notes when the last transition committed, so the figure does not include the
    monitor's polling interval (which would be a fifth of a half-second run)."""

    last_tick_at = 0.0

    async def tick(self, lease: Lease) -> TickResult:
        result = await super().tick(lease)
        self.last_tick_at = time.perf_counter()
        return result


def instant_context(db: Database, script: dict[str, Any], turns: int) -> ExecutorContext:
    """The executor with one tool that returns at once, so a figure is the executor's own cost;
    the agent may take a few turns more than the script plays."""
    scheduler = Scheduler(db, lease_seconds=30)
    agent = AgentConfig(tools=("instant",), limits=AgentLimits(max_turns=turns + 5))
    return ExecutorContext(
        db=db, scheduler=scheduler, provider=ScriptedProvider.from_dict(script),
        tools={"instant": Instant()}, agents={"default": agent}, clock=SystemClock(),
    )


async def transitions_per_s(db: Database) -> Rate:
    ctx = instant_context(db, SCRIPT, TURNS)
    scheduler = ctx.scheduler
    runner = TimedRunner(ctx)
    worker = Worker(scheduler, runner, concurrency=TASKS, poll_interval_s=0.01)
    ids = [
        (
            await scheduler.transact(scheduler.schedule, TaskSpec(agent="default", message="go"))
        ).task.task_id
        for _ in range(TASKS)
    ]
    started, cpu = time.perf_counter(), time.process_time()
    running = asyncio.create_task(worker.run())
    for task_id in ids:  # sparse polling: the monitor must not compete for the database
        while not ((t := await scheduler.get(task_id)) and t.status.is_terminal):
            await asyncio.sleep(0.1)
    worker.stop()
    await running
    spent = time.process_time() - cpu
    return Rate(worker.ticks / (runner.last_tick_at - started), 1000 * spent / worker.ticks)


def fresh(url_for: str) -> Database:
    db = Database.from_url(url_for)
    upgrade(db.engine)
    return db


def measure(url_factory: Any, cpu: list[tuple[float, float]]) -> tuple[float, float]:
    """(transitions/s, commits/s) of one run; appends (CPU ms per transition, per commit)."""
    db = fresh(url_factory())
    try:
        baseline = raw_commits_per_s(db)
        value = asyncio.run(transitions_per_s(db))
        cpu.append((value.cpu_ms_each, baseline.cpu_ms_each))
        return value.per_s, baseline.per_s
    finally:
        db.close()


def cpu_figure(name: str, runs: list[tuple[float, float]], target: float) -> Figure:
    """The worker's CPU per phase (the bench process is the worker: the monitor polls every
    100 ms), median of the runs; baseline, for scale: CPU per raw commit."""
    return Figure(
        name,
        statistics.median(c for c, _ in runs),
        statistics.median(b for _, b in runs),
        target,
        higher_is_better=False,
        judged_on="value",
    )


def sqlite_urls(folder: Path) -> Any:
    return lambda: f"sqlite:///{folder / f'bench-{uuid.uuid4().hex[:8]}.db'}"


def pg_urls() -> Any:
    from sqlalchemy import create_engine

    def make() -> str:
        engine = create_engine(PG_URL)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA IF EXISTS keel_bench CASCADE"))
            conn.execute(text("CREATE SCHEMA keel_bench"))
        engine.dispose()
        return PG_URL + "?options=-csearch_path%3Dkeel_bench"

    return make


def main() -> int:
    figures: list[Figure] = []
    cpu: list[Figure] = []
    sqlite_cpu: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as folder:
        figures.append(
            median_figure(
                "executor_phases_per_s_sqlite",
                RUNS,
                lambda: measure(sqlite_urls(Path(folder)), sqlite_cpu),
                0.5,
            )
        )
    cpu.append(cpu_figure("worker_cpu_ms_per_phase_sqlite", sqlite_cpu, 2.0))
    if postgres_available():
        pg_cpu: list[tuple[float, float]] = []
        figures.append(
            median_figure(
                "executor_phases_per_s_postgresql", RUNS, lambda: measure(pg_urls(), pg_cpu), 0.5
            )
        )
        cpu.append(cpu_figure("worker_cpu_ms_per_phase_postgresql", pg_cpu, 3.0))
    else:
        print("PostgreSQL not reachable: skipping its figure", file=sys.stderr)
    for figure in [*cpu, *figures[1:]]:
        print(figure.result_line())
    # The SQLite figure is the headline: it is printed last, under the name.
    headline = figures[0]
    print(
        Figure(
            "executor_phases_per_s", headline.value, headline.baseline, 0.5, ratios=headline.ratios
        ).result_line()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
