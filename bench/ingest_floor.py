"""How close to the bare endpoint any ingest can come once it also sends the 👀 (#18).

``bench.ingest`` compares Keel with ``bench.bare_ingest``, which verifies and stores a delivery
and does nothing else. Keel must also acknowledge each new delivery on its origin (a 👀
reaction, sent by slack_sdk on Slack), and while a burst lasts those calls share its
interpreter. This benchmark adds that one duty to the bare endpoint itself and nothing else:
no routing, no task, no outbox, no durable record of the 👀. Five servers, one process each,
the same load (``bench.ingest``'s deliveries, 16 connections, closed loop), in turns:

- ``bare``: the baseline of ``bench.ingest``;
- ``bare + 👀``: the same, and each new delivery's 👀 sent once its row is committed;
- ``bare + 👀, grouped``: the same with the inserts group-committed on a thread of their
  own, as Keel's are on SQLite (deliveries that arrive together share one fsync);
- ``bare + 👀, no row``: the 👀 without the insert (verify, parse, react), a floor under any
  ingest that stores what it accepts;
- ``keel``: ``bench.keel_http``, as in ``bench.ingest``.

Each server's burst is followed by a wait until it has sent every 👀 it owes; its CPU per
delivery counts until then. Medians of 5 runs of the rate over the bare endpoint's in the
same run. The figures are informational: #18's target (0.7) is judged by ``bench.ingest``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.emulators import Emulators, start_emulators
from bench.ingest import (
    CONNECTIONS,
    DEADLINE_S,
    PER_RUN,
    RATIO_TARGET,
    batch,
    settle,
    start_servers,
)
from bench.load import closed_loop
from bench.procs import Proc, free_port, start, wait_http

RUNS = 5
STRIDE = 4 * PER_RUN  # deliveries numbered per run: a batch for bare and keel, one per variant
VARIANTS = {"bare + 👀": [], "bare + 👀, grouped": ["--group-commit"],
            "bare + 👀, no row": ["--no-store"]}


@dataclass
class Server:
    name: str
    proc: Proc
    port: int
    settled: Callable[[], Awaitable[None]]  # until every 👀 owed is sent
    own_batch: int  # which of the run's batches it is sent (0 shared by bare and keel)


def floor_server(folder: Path, name: str, slack: str, github: str) -> Server:
    args = VARIANTS[name]
    port = free_port()
    proc = start([sys.executable, "-m", "bench.bare_ingest", "--db", str(folder / f"{name}.db"),
                  "--port", str(port), "--slack-api", slack, "--github-api", github, *args],
                 folder / f"{name}.log")
    wait_http(proc, f"http://127.0.0.1:{port}/docs")

    async def settled() -> None:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                if not (await client.get(f"http://127.0.0.1:{port}/floor/pending")).json():
                    return
                await asyncio.sleep(0.1)

    return Server(name, proc, port, settled, 1 + list(VARIANTS).index(name))


def start_all(folder: Path, emulators: Emulators) -> list[Server]:
    """bench.ingest's Keel and bare endpoint, then the bare endpoint's variants."""
    slack, github = emulators.slack_url + "/api/", emulators.github_url
    both = start_servers(folder, emulators)
    servers = [Server("bare", both.bare, both.bare_port, _nothing, 0)]
    try:
        servers += [floor_server(folder, name, slack, github) for name in VARIANTS]
    except BaseException:
        both.keel.stop()
        for server in servers:
            server.proc.stop()
        raise
    return [*servers, Server("keel", both.keel, both.keel_port, lambda: settle(both.keel_db), 0)]


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Measured:
    rate: float
    cpu_ms: float  # per delivery answered, until its 👀 were all sent


async def one_run(servers: list[Server], first: int) -> dict[str, Measured]:
    batches = [batch(first + n * PER_RUN, PER_RUN) for n in range(1 + len(VARIANTS))]
    measured: dict[str, Measured] = {}
    for server in servers:
        await server.settled()
        cpu = server.proc.cpu_s()
        run = await closed_loop(server.port, batches[server.own_batch].requests, CONNECTIONS,
                                DEADLINE_S)
        await server.settled()
        spent = server.proc.cpu_s() - cpu
        measured[server.name] = Measured(run.rate, 1000 * spent / max(1, len(run.ok)))
    return measured


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="keel-bench-floor-") as name:
        folder = Path(name)
        emulators = start_emulators(messages=RUNS * STRIDE + 2, issues=RUNS * STRIDE + 2)
        try:
            servers = start_all(folder, emulators)
            try:
                results = [asyncio.run(one_run(servers, run * STRIDE)) for run in range(RUNS)]
            finally:
                for server in servers:
                    server.proc.stop()
            # A 👀 that failed costs less than one that landed: say so if any did.
            failed = {s.name: (folder / f"{s.name}.log").read_text().count("a 👀 failed")
                      for s in servers if s.name.startswith("bare + ")}
        finally:
            emulators.stop()
    print(f"  {RUNS} runs of {PER_RUN} deliveries per server, {CONNECTIONS} connections; "
          f"medians, rate over the bare endpoint's in the same run:")
    for server in servers:
        ratios = [r[server.name].rate / r["bare"].rate for r in results]
        rate = statistics.median(r[server.name].rate for r in results)
        cpu = statistics.median(r[server.name].cpu_ms for r in results)
        print(f"  {server.name:18s} {rate:7.0f}/s  ratio {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})  CPU {cpu:.2f} ms per delivery")
    print(f"  👀 that failed to send: {failed}")
    print(f"  (#18's target for Keel: ratio >= {RATIO_TARGET}; measured at "
          f"{time.strftime('%Y-%m-%d %H:%M')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
