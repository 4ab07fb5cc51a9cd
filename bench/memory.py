"""Memory: the RSS of ``keel serve`` idle, and after many completed tasks.

``keel serve`` (SQLite, 16 in-process worker loops, the scripted model answering at once) is
sent signed Slack mentions on distinct threads, with at most 64 unfinished at a time, until
10k are sent or a time bound passes; each becomes a task that is acknowledged (👀), run and
answered in its thread. RSS is read from /proc when idle (after start-up settles) and once
every task sent is finished and its replies have landed. Baseline, same run: the idle RSS
of a bare FastAPI+uvicorn process (``bench.bare_ingest``). Targets (#19): idle ``keel
worker`` <= 90 MB and ``keel serve`` <= 120 MB; growth <= 30 MB after 10k tasks. Growth is
measured after as many tasks as fit in the time bound, and ``memory_growth_tasks`` says how
many that was against the 10k asked for.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import Figure
from bench.emulators import Emulators, start_emulators
from bench.procs import Proc, free_port, keel_command, start, wait_http, wait_log
from bench.world import keel_config, serve_keel, slack_mention
from runtime.store.engine import make_engine
from runtime.store.migrate import upgrade

TARGET_TASKS = 10_000
BUDGET_S = 240.0
DRAIN_S = 30.0
# A task mostly waits (its Slack calls, its commits): at the default 4 loops serve sat at
# half a core; 16 loops and 64 outstanding keep it busy without queueing more than it runs.
CONCURRENCY = 16
OUTSTANDING = 64
CHECKPOINT_EVERY = 1_000
SEEDED = TARGET_TASKS  # one seeded message per mention


def settled_rss(proc: Proc, samples: int = 5) -> float:
    readings = []
    for _ in range(samples):
        readings.append(proc.rss_mb())
        time.sleep(0.2)
    return statistics.median(readings)


def finished(db: Path) -> tuple[int, int]:
    """(terminal tasks, posts still to land)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        done = conn.execute(
            "SELECT count(*) FROM tasks WHERE status IN "
            "('succeeded', 'failed', 'canceled', 'timed_out')"
        ).fetchone()[0]
        unsent = conn.execute(
            "SELECT count(*) FROM outbox WHERE state NOT IN ('landed', 'failed')"
        ).fetchone()[0]
        return int(done), int(unsent)
    finally:
        conn.close()


async def drive(url: str, db: Path, proc: Proc) -> tuple[int, list[tuple[int, float]]]:
    """Send mentions until the budget or the target; returns (sent, [(done, RSS MB)])."""
    sent, checkpoints = 0, list[tuple[int, float]]()
    deadline = time.monotonic() + BUDGET_S
    async with httpx.AsyncClient(timeout=30) as client:
        limit = min(TARGET_TASKS, SEEDED)
        while sent < limit and time.monotonic() < deadline:
            done, _ = finished(db)
            if done // CHECKPOINT_EVERY > len(checkpoints):
                checkpoints.append((done, proc.rss_mb()))
            for _ in range(max(0, min(OUTSTANDING - (sent - done), limit - sent))):
                signed = slack_mention(sent)
                response = await client.post(
                    url + "/slack/events", content=signed.body, headers=signed.headers
                )
                response.raise_for_status()
                sent += 1
            await asyncio.sleep(0.1)
    return sent, checkpoints


def drain(db: Path, sent: int) -> int:
    deadline = time.monotonic() + DRAIN_S
    done, unsent = finished(db)
    while (done < sent or unsent) and time.monotonic() < deadline:
        time.sleep(0.2)
        done, unsent = finished(db)
    return done


def bare_idle_rss(folder: Path) -> float:
    port = free_port()
    bare = start([sys.executable, "-m", "bench.bare_ingest", "--db", str(folder / "bare.db"),
                  "--port", str(port)], folder / "bare.log")
    try:
        wait_http(bare, f"http://127.0.0.1:{port}/docs")
        time.sleep(1)
        return settled_rss(bare)
    finally:
        bare.stop()


def migrated(db: Path) -> str:
    """A database ``keel db upgrade`` brought up to date, as a deployment's is when a process
    (re)starts: the idle figures are of Keel running, not of its first migration."""
    url = f"sqlite:///{db}"
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return url


def worker_idle_rss(folder: Path, emulators: Emulators) -> float:
    """``keel worker`` (same configuration, its own SQLite file) once start-up settled."""
    own = folder / "worker"
    own.mkdir()
    config = keel_config(own, emulators, db_url=migrated(own / "keel.db"))
    worker = start(keel_command("worker", "--config", str(config)), own / "worker.log")
    try:
        wait_log(worker, " running")
        time.sleep(3)  # as for serve: migrations and first polls settle
        return settled_rss(worker)
    finally:
        worker.stop()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="keel-bench-memory-") as name:
        folder = Path(name)
        baseline = bare_idle_rss(folder)
        emulators = start_emulators(messages=SEEDED)
        try:
            worker_idle = worker_idle_rss(folder, emulators)
            migrated(folder / "keel.db")  # the file serve_keel configures
            keel, url, db = serve_keel(folder, emulators, concurrency=CONCURRENCY)
            try:
                time.sleep(3)  # let start-up work (migrations, first polls) settle
                idle = settled_rss(keel)
                started, cpu = time.monotonic(), keel.cpu_s()
                sent, checkpoints = asyncio.run(drive(url, db, keel))
                done = drain(db, sent)
                elapsed, cpu = time.monotonic() - started, keel.cpu_s() - cpu
                time.sleep(1)
                after = settled_rss(keel)
            finally:
                keel.stop()
        finally:
            emulators.stop()
    trend = ", ".join(f"{n} tasks: {rss:.1f} MB" for n, rss in checkpoints)
    print(f"  idle {idle:.1f} MB; {done} of {sent} tasks completed in {elapsed:.0f} s "
          f"(target {TARGET_TASKS}), {1000 * cpu / max(done, 1):.1f} ms of serve CPU each; "
          f"RSS {trend}; after {after:.1f} MB")
    print(f"  keel worker idle {worker_idle:.1f} MB")
    print(Figure("memory_idle_rss_worker_mb", worker_idle, baseline, 90,
                 higher_is_better=False, judged_on="value").result_line())
    print(Figure("memory_idle_rss_mb", idle, baseline, 120, higher_is_better=False,
                 judged_on="value").result_line())
    print(Figure("memory_growth_rss_mb", after - idle, idle, 30,
                 higher_is_better=False, judged_on="value").result_line())
    print(Figure("memory_growth_tasks", done, TARGET_TASKS, TARGET_TASKS,
                 judged_on="value").result_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
