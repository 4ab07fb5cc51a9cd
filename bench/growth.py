"""Growth: tick and mailbox-read latency with 1k vs 100k stored tasks (and ~1M transcript items).

History is made the way Keel makes it, then multiplied in SQL: one signed Slack mention goes
through the real app (ingress, routing, ack, a task of four ``post_update`` turns, the
completion reply), and every row it left in every table is cloned N times with its ids,
tokens and keys made distinct (``clone_history``). Two databases get 1k and 100k such tasks.

The probe, in interleaved runs on both, is the real worker and executor on SQLite: fresh
tasks of 5 turns x 1 instant tool (median tick latency), then ``read_mailbox`` of a task with
5 messages (median). Also timed: the scan for pending signals that ``keel serve`` runs every
10 s. Target: 100k / 1k <= 1.2 for each figure (no scan grows with history).
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from adapters.config import load_config
from adapters.emulators.server import serve
from adapters.web.app import create_app
from bench.common import Figure
from bench.emulators import start_emulators
from bench.executor_overhead import instant_context
from bench.world import keel_config, slack_mention
from runtime.executor.runner import Runner, TickResult
from runtime.scheduler import Scheduler
from runtime.store import signals as signal_store
from runtime.store.engine import Database
from runtime.store.records import Lease, TaskSpec, TextPart
from runtime.worker import Worker

SMALL, LARGE = 1_000, 100_000
RUNS = 5
PROBE_TASKS, PROBE_TURNS = 3, 5
MAILBOX_READS = 200
HISTORY_SCRIPT: dict[str, Any] = {
    "scripts": [{"turns": [{"tool_calls": [{"name": "post_update", "args": {"text": "step"}}]}]
                * 4 + [{"say": "done: four steps, each reported in the thread"}]}]
}
PROBE_SCRIPT: dict[str, Any] = {
    "scripts": [{"turns": [{"tool_calls": [{"name": "instant", "args": {}}]}] * PROBE_TURNS
                + [{"say": "done"}]}]
}


# -- history ------------------------------------------------------------------------------


def make_template(folder: Path) -> Path:
    """A database holding exactly one request's rows, made by the real app."""
    db = folder / "template.db"
    emulators = start_emulators(messages=1)
    try:
        config = keel_config(folder, emulators, db_url=f"sqlite:///{db}", script=HISTORY_SCRIPT)
        keel = serve(create_app(load_config(config)), lifespan="on")
        try:
            signed = slack_mention(0)
            httpx.post(keel.url + "/slack/events", content=signed.body,
                       headers=signed.headers, timeout=30).raise_for_status()
            _wait_finished(db)
        finally:
            keel.stop()
    finally:
        emulators.stop()
    return db


def _wait_finished(db: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conn = sqlite3.connect(db, timeout=30)
        try:
            done = conn.execute("SELECT count(*) FROM tasks WHERE status = 'succeeded'").fetchone()
            open_posts = conn.execute(
                "SELECT count(*) FROM outbox WHERE state NOT IN ('landed', 'failed')"
            ).fetchone()
        finally:
            conn.close()
        if done[0] == 1 and open_posts[0] == 0:
            return
        time.sleep(0.2)
    raise RuntimeError("the template request did not finish")


# Values that identify one request; every text column has them made distinct per clone.
_IDENTITIES = (
    ("tasks", "id"), ("tasks", "objective_key"), ("tasks", "origin_thread_ref"),
    ("signals", "id"), ("signals", "delivery_id"), ("signals", "dedupe_key"),
    ("signals", "thread_ref"), ("signals", "objective_key"), ("mailbox_messages", "id"),
    ("deliveries", "token"), ("outbox", "idempotency_key"), ("outbox", "thread_ref"),
    ("executions", "lease_id"), ("machines", "machine_id"),
)


def clone_history(db: Path, copies: int) -> None:
    """Add ``copies`` clones of every row in the template database, in one transaction."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        tables = [t for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name != 'alembic_version'")]
        identities = _identity_values(conn, tables)
        conn.execute("BEGIN")
        conn.execute("CREATE TEMP TABLE n (i INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO n VALUES (?)", ((i,) for i in range(1, copies + 1)))
        for table in tables:
            _clone_table(conn, table, identities)
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


def _identity_values(conn: sqlite3.Connection, tables: list[str]) -> list[str]:
    found: set[str] = set()
    for table, column in _IDENTITIES:
        if table in tables:
            found.update(str(v) for (v,) in conn.execute(f"SELECT {column} FROM {table}") if v)
    return sorted(found, key=len, reverse=True)


def _clone_table(conn: sqlite3.Connection, table: str, identities: list[str]) -> None:
    columns = list(conn.execute(f"PRAGMA table_info({table})"))
    rows = list(conn.execute(f"SELECT * FROM {table}"))
    if not rows:
        return
    names, expressions = [], []
    for cid, name, kind, _notnull, _default, pk in columns:
        if pk and kind.upper() == "INTEGER" and name == "id":
            continue  # a fresh autoincrement id
        values = [str(row[cid]) for row in rows if isinstance(row[cid], str)]
        expression = f'src."{name}"'
        for identity in identities:
            if any(identity in value for value in values):
                expression = f"replace({expression}, '{identity}', '{identity}_' || n.i)"
        names.append(f'"{name}"')
        expressions.append(expression)
    conn.execute(f"CREATE TEMP TABLE src_{table} AS SELECT * FROM {table}")
    conn.execute(
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(expressions)} "
        f"FROM n, src_{table} AS src"
    )


def counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("tasks", "transcript_items", "signals", "deliveries", "outbox")}
    finally:
        conn.close()


def history_databases(folder: Path) -> dict[int, Path]:
    template = make_template(folder)
    made = {}
    for size in (SMALL, LARGE):
        path = folder / f"history-{size}.db"
        source, target = sqlite3.connect(template), sqlite3.connect(path)
        source.backup(target)
        source.close()
        target.close()
        clone_history(path, size - 1)
        made[size] = path
    return made


# -- the probe ------------------------------------------------------------------------------


class TimedRunner(Runner):
    """The real runner; it remembers how long each tick took."""

    durations: list[float]

    async def tick(self, lease: Lease) -> TickResult:
        started = time.perf_counter()
        result = await super().tick(lease)
        self.durations.append(time.perf_counter() - started)
        return result


async def tick_latency(db: Database) -> float:
    ctx = instant_context(db, PROBE_SCRIPT, PROBE_TURNS)
    scheduler = ctx.scheduler
    runner = TimedRunner(ctx)
    runner.durations = []
    worker = Worker(scheduler, runner, concurrency=1, poll_interval_s=0.01)
    ids = [
        (
            await scheduler.transact(scheduler.schedule, TaskSpec(agent="default", message="go"))
        ).task.task_id
        for _ in range(PROBE_TASKS)
    ]
    running = asyncio.create_task(worker.run())
    for task_id in ids:
        while not ((t := await scheduler.get(task_id)) and t.status.is_terminal):
            await asyncio.sleep(0.05)
    worker.stop()
    await running
    return statistics.median(runner.durations)


async def mailbox_latency(db: Database) -> float:
    scheduler = Scheduler(db)
    task = (
        await scheduler.transact(scheduler.schedule, TaskSpec(agent="default", message="probe"))
    ).task
    for n in range(5):
        await scheduler.transact(
            scheduler.append_mailbox, task.task_id, f"probe-{n}", [TextPart("hi")]
        )
    samples = []
    for _ in range(MAILBOX_READS):
        started = time.perf_counter()
        await scheduler.read_mailbox(task.task_id, after=2)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def pending_scan_latency(db: Database) -> float:
    now = datetime.now(UTC)
    samples = []
    for _ in range(20):
        started = time.perf_counter()
        await db.read(lambda s: signal_store.pending_signals(s, now, 100))
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def probe(path: Path) -> tuple[float, float, float]:
    db = Database.from_url(f"sqlite:///{path}")
    try:

        async def all_three() -> tuple[float, float, float]:
            return (
                await tick_latency(db),
                await mailbox_latency(db),
                await pending_scan_latency(db),
            )

        return asyncio.run(all_three())
    finally:
        db.close()


def ms_figure(name: str, pairs: Iterable[tuple[float, float]]) -> Figure:
    pairs = list(pairs)
    large = statistics.median(p[1] for p in pairs) * 1000
    small = statistics.median(p[0] for p in pairs) * 1000
    return Figure(
        name, large, small, 1.2, higher_is_better=False, ratios=tuple(b / a for a, b in pairs if a)
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="keel-bench-growth-") as name:
        started = time.monotonic()
        databases = history_databases(Path(name))
        made = time.monotonic() - started
        sizes = {size: counts(path) for size, path in databases.items()}
        runs = [(probe(databases[SMALL]), probe(databases[LARGE])) for _ in range(RUNS)]
    for size, found in sizes.items():
        print(f"  history {size}: " + ", ".join(f"{n} {t}" for t, n in found.items()))
    print(
        f"  history built in {made:.0f} s; values are the {LARGE // 1000}k database, "
        f"baselines the {SMALL // 1000}k one (ms)"
    )
    print(ms_figure("growth_pending_signal_scan_ms", ((s[2], b[2]) for s, b in runs)).result_line())
    print(ms_figure("growth_mailbox_read_ms", ((s[1], b[1]) for s, b in runs)).result_line())
    print(ms_figure("growth_tick_ms", ((s[0], b[0]) for s, b in runs)).result_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
