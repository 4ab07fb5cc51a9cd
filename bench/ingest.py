"""Webhook ingest: signed Slack mentions and GitHub comments into Keel vs a bare endpoint.

Keel (``create_app`` on SQLite, ``bench.keel_http``: no task claiming, so the request path is
what is measured) and the baseline (``bench.bare_ingest``: verify the same HMAC, insert one
row with the same pragmas) run as processes of their own on loopback; the emulators, which
Keel's acknowledgements reach, run in a third. Each run sends both servers the same list of
deliveries: half Slack ``app_mention`` events on distinct threads, half GitHub
``issue_comment`` webhooks on distinct issues, and one in twenty a redelivery of an earlier
one (Slack with ``X-Slack-Retry-Num``, GitHub with the same delivery GUID).

Per run: the maximum rate (closed loop, 16 connections), then an open-loop rate of half
Keel's maximum for the p99; each phase starts once Keel has sent every 👀 it owes (a burst
leaves a backlog of acknowledgements in the outbox that would otherwise load the next phase).
At the end Keel's ``signals`` table must hold each distinct
delivery exactly once. Medians of 5 runs; targets: ratio >= 0.7, p99 <= 50 ms at half rate (#18).

For reference the run also prints what one 👀 costs its sender: the client CPU of a
``reactions.add`` through slack_sdk on a kept-alive aiohttp session, as Keel's outbox sends
it, next to the CPU per delivery the ratio target leaves Keel (the bare endpoint's over 0.7).
A sustained rate pays for every 👀 it owes, so this is a floor under Keel's cost.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bench.common import Figure, percentile
from bench.emulators import BOT_TOKEN, CHANNEL, Emulators, message_ts, start_emulators
from bench.load import Request, Run, closed_loop, open_loop
from bench.procs import Proc, free_port, start, wait_http
from bench.world import (
    github_comment,
    github_delivery_id,
    keel_config,
    slack_event_id,
    slack_mention,
)

RUNS = 5
PER_RUN = 250  # deliveries at the maximum rate, per run and server
AT_HALF_RATE = 150
CONNECTIONS = 16
REDELIVER_EVERY = 20
DEADLINE_S = 60.0
RATIO_TARGET = 0.7  # of the bare endpoint's rate (#18)
REFERENCE_CALLS = 1000  # reactions.add calls timed for the 👀's own cost
SLACK_PATH, GITHUB_PATH = "/slack/events", "/github/webhook"

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Batch:
    requests: list[Request]
    keys: list[Key]  # the delivery each request carries, in order


def batch(first: int, count: int) -> Batch:
    """``count`` deliveries numbered from ``first``; every 20th repeats an earlier one."""
    requests: list[Request] = []
    keys: list[Key] = []
    for n in range(first, first + count):
        again = (n - first) % REDELIVER_EVERY == REDELIVER_EVERY - 1
        index = n - REDELIVER_EVERY // 2 if again else n
        retry = 1 if again else None
        if index % 2:
            signed = slack_mention(index, retry=retry)
            requests.append(Request(SLACK_PATH, signed.body, signed.headers))
            keys.append(("slack", slack_event_id(index)))
        else:
            signed = github_comment(index + 1)  # issue numbers start at 1
            requests.append(Request(GITHUB_PATH, signed.body, signed.headers))
            keys.append(("github", github_delivery_id(index + 1)))
    return Batch(requests, keys)


@dataclass
class Servers:
    keel: Proc
    keel_port: int
    bare: Proc
    bare_port: int
    keel_db: Path


def start_servers(folder: Path, emulators: Emulators) -> Servers:
    keel_port, bare_port = free_port(), free_port()
    keel_db = folder / "keel.db"
    config = keel_config(folder, emulators, db_url=f"sqlite:///{keel_db}", port=keel_port)
    keel = start([sys.executable, "-m", "bench.keel_http", "--config", str(config)],
                 folder / "keel.log")
    bare = start([sys.executable, "-m", "bench.bare_ingest", "--db", str(folder / "bare.db"),
                  "--port", str(bare_port)], folder / "bare.log")
    try:
        wait_http(keel, f"http://127.0.0.1:{keel_port}/readyz")
        wait_http(bare, f"http://127.0.0.1:{bare_port}/docs")
    except RuntimeError:
        keel.stop()
        bare.stop()
        raise
    return Servers(keel, keel_port, bare, bare_port, keel_db)


@dataclass(frozen=True, slots=True)
class RunResult:
    keel_max: Run
    bare_max: Run
    keel_half: Run
    bare_half: Run
    keel_cpu_ms: float  # per delivery answered at the maximum rate, its 👀 included
    keel_burst_cpu_ms: float  # the same, while the burst lasted
    bare_cpu_ms: float


def acks_unsent(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute("SELECT count(*) FROM outbox WHERE state NOT IN ('landed', 'failed')")
        # GitHub deliveries still held for their permission lookup are work in flight too.
        held = conn.execute("SELECT count(*) FROM github_inbox")
        return int(row.fetchone()[0]) + int(held.fetchone()[0])
    finally:
        conn.close()


async def settle(db: Path, timeout_s: float = 30.0) -> None:
    """Until Keel has sent the 👀 for every delivery so far: each phase starts unloaded."""
    for _ in range(int(timeout_s / 0.1)):
        if not acks_unsent(db):
            return
        await asyncio.sleep(0.1)


async def one_run(servers: Servers, first: int) -> tuple[RunResult, list[Key]]:
    peak = batch(first, PER_RUN)
    await settle(servers.keel_db)
    max_runs, cpu_s = {}, {}
    keel_cpu = servers.keel.cpu_s()
    for name, proc, port in (("keel", servers.keel, servers.keel_port),
                             ("bare", servers.bare, servers.bare_port)):
        cpu_s[name] = proc.cpu_s()
        max_runs[name] = await closed_loop(port, peak.requests, CONNECTIONS, DEADLINE_S)
        cpu_s[name] = proc.cpu_s() - cpu_s[name]
    rate = max_runs["keel"].rate / 2
    half = batch(first + PER_RUN, AT_HALF_RATE)
    await settle(servers.keel_db)
    # Keel's from its burst until every 👀 of it is sent: the acknowledgements are its cost.
    cpu_s["keel_all"] = servers.keel.cpu_s() - keel_cpu
    cpu_ms = {name: 1000 * spent / max(1, len(max_runs[name[:4]].ok))
              for name, spent in cpu_s.items()}
    keel_half = await open_loop(servers.keel_port, half.requests, rate, CONNECTIONS, DEADLINE_S)
    bare_half = await open_loop(servers.bare_port, half.requests, rate, CONNECTIONS, DEADLINE_S)
    result = RunResult(max_runs["keel"], max_runs["bare"], keel_half, bare_half,
                       cpu_ms["keel_all"], cpu_ms["keel"], cpu_ms["bare"])
    accepted = [peak.keys[s.index] for s in max_runs["keel"].ok]
    accepted += [half.keys[s.index] for s in keel_half.ok]
    return result, accepted


async def reaction_cpu_ms(emulators: Emulators, first_message: int) -> float:
    """Client CPU per ``reactions.add`` from slack_sdk, 16 in flight on one aiohttp session,
    each on a message of its own."""
    gate = asyncio.Semaphore(CONNECTIONS)
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=emulators.slack_url + "/api/",
                                session=session, retry_handlers=[])

        async def react(n: int) -> None:
            async with gate:
                try:
                    await client.reactions_add(channel=CHANNEL, timestamp=message_ts(n),
                                               name="eyes")
                except SlackApiError as e:  # an answer all the same: its cost counts
                    print(f"  reactions.add {n}: {e.response.get('error')}")

        await react(first_message)  # the connection, opened once
        started = time.process_time()
        await asyncio.gather(*(react(first_message + 1 + n) for n in range(REFERENCE_CALLS)))
        return 1000 * (time.process_time() - started) / REFERENCE_CALLS


def stored_keys(db: Path) -> list[Key]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT provider, delivery_id FROM signals")
        stored = [(str(provider), str(delivery_id)) for provider, delivery_id in rows]
        # A GitHub delivery held for its permission lookup is stored (committed before the
        # answer) but not routed yet: it counts once, as stored.
        routed = set(stored)
        held = conn.execute("SELECT delivery_id FROM github_inbox")
        return stored + [k for (d,) in held if (k := ("github", str(d))) not in routed]
    finally:
        conn.close()


def ms(run: Run, fraction: float) -> float:
    return 1000 * percentile([s.latency_s for s in run.ok] or [0.0], fraction)


def median_of(results: list[RunResult], pick: Callable[[RunResult], float]) -> float:
    return statistics.median(pick(r) for r in results)


def describe(results: list[RunResult]) -> None:
    for i, r in enumerate(results):
        print(
            f"  run {i + 1}: keel {r.keel_max.rate:.0f}/s (p50 {ms(r.keel_max, 0.5):.1f} ms, "
            f"p99 {ms(r.keel_max, 0.99):.1f} ms), bare {r.bare_max.rate:.0f}/s "
            f"(p50 {ms(r.bare_max, 0.5):.1f} ms, p99 {ms(r.bare_max, 0.99):.1f} ms); "
            f"at {r.keel_max.rate / 2:.0f}/s keel p99 {ms(r.keel_half, 0.99):.1f} ms, "
            f"bare p99 {ms(r.bare_half, 0.99):.1f} ms; CPU per delivery keel "
            f"{r.keel_cpu_ms:.2f} ms ({r.keel_burst_cpu_ms:.2f} in the burst), "
            f"bare {r.bare_cpu_ms:.2f} ms; refused keel "
            f"{len(r.keel_max.samples) - len(r.keel_max.ok)}+"
            f"{len(r.keel_half.samples) - len(r.keel_half.ok)}"
        )


def figures(results: list[RunResult], lost: int, duplicated: int) -> list[Figure]:
    ratios = tuple(r.keel_max.rate / r.bare_max.rate for r in results if r.bare_max.rate)
    return [
        Figure("ingest_p99_ack_ms_at_max_rate", median_of(results, lambda r: ms(r.keel_max, .99)),
               median_of(results, lambda r: ms(r.bare_max, .99)), 3000, higher_is_better=False,
               judged_on="value"),
        Figure("ingest_p99_ack_ms_at_half_rate",
               median_of(results, lambda r: ms(r.keel_half, .99)),
               median_of(results, lambda r: ms(r.bare_half, .99)), 50, higher_is_better=False,
               judged_on="value"),
        Figure("ingest_lost_or_duplicated_signals", lost + duplicated, 0, 0,
               higher_is_better=False, judged_on="value"),
        Figure("ingest_signals_per_s", median_of(results, lambda r: r.keel_max.rate),
               median_of(results, lambda r: r.bare_max.rate), RATIO_TARGET, ratios=ratios),
    ]


async def measure(servers: Servers) -> tuple[list[RunResult], list[Key]]:
    results: list[RunResult] = []
    sent: list[Key] = []
    for run in range(RUNS):
        result, keys = await one_run(servers, run * (PER_RUN + AT_HALF_RATE))
        results.append(result)
        sent += keys
    return results, sent  # the deliveries Keel answered 200


def main() -> int:
    total = RUNS * (PER_RUN + AT_HALF_RATE)
    with tempfile.TemporaryDirectory(prefix="keel-bench-ingest-") as name:
        folder = Path(name)
        emulators = start_emulators(messages=total + REFERENCE_CALLS + 3, issues=total + 2)
        servers: Servers | None = None
        try:
            servers = start_servers(folder, emulators)
            results, sent = asyncio.run(measure(servers))
            stored = stored_keys(servers.keel_db)
            servers.keel.stop()  # the reference runs on a quiet machine
            servers.bare.stop()
            reaction_ms = asyncio.run(reaction_cpu_ms(emulators, total + 2))
        finally:
            if servers is not None:
                servers.keel.stop()
                servers.bare.stop()
            emulators.stop()
    describe(results)
    lost = len(set(sent) - set(stored))
    duplicated = len(stored) - len(set(stored))
    print(f"  deliveries: {len(set(sent))} distinct accepted, {len(stored)} signals stored, "
          f"{lost} lost, {duplicated} duplicated")
    allowed_ms = median_of(results, lambda r: r.bare_cpu_ms) / RATIO_TARGET
    print(f"  for reference: one reactions.add costs its sender {reaction_ms:.2f} ms of CPU; "
          f"the {RATIO_TARGET} target leaves Keel {allowed_ms:.2f} ms per delivery, its 👀 "
          "included")
    for figure in figures(results, lost, duplicated):
        print(figure.result_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
