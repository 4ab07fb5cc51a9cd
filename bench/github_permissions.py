"""The GitHub webhook's answer while GitHub's permission endpoint is slow.

``keel serve`` (SQLite, no workers) behind the GitHub emulator, whose
``GET /repos/{owner}/{repo}/collaborators/{user}/permission`` answers only after 12 s
(the lookup Keel makes for every person's request). 200 signed ``issue_comment`` deliveries
from 200 different people (so no cached answer helps) are sent at 20 per second; the figure
is the p99 time to Keel's HTTP answer. Baseline, same run: the same deliveries to a second
Keel whose permission endpoint answers at once. Target: p99 <= 100 ms (the webhook must not
wait for GitHub). Each delivery must also end up routed once the lookups return.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from adapters.config import build_config
from adapters.emulators.corpus import load_github_example
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import serve
from adapters.emulators.webhooks import sign_github
from adapters.web.app import create_app
from bench.common import Figure, percentile
from runtime.store.engine import Database
from runtime.store.models import SignalRow

DELIVERIES = 200
RATE_PER_S = 20.0
DELAY_S = 12.0
SECRET = "bench-webhook-secret"
TOKEN = "ghp_bench_token"
REPO = "Codertocat/Hello-World"


def _config(workdir: Path, github_url: str) -> Any:
    return build_config(
        {
            "server": {"host": "127.0.0.1", "port": 0},
            "database": {"url": f"sqlite:///{workdir / 'keel.db'}"},
            "workspace": {"root": str(workdir / "ws"), "sandbox": "none"},
            "github": {
                "token": TOKEN,
                "webhook_secret": SECRET,
                "api_url": github_url,
                "catch_up": False,
            },
            "model": {"provider": "scripted"},
            "reporting": {"progress": False},
        },
        env={},
    )


async def _send(url: str) -> list[float]:
    latencies: list[float] = []
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(i: int) -> None:
            due = started + i / RATE_PER_S
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            payload = load_github_example(
                "issue_comment/created",
                **{
                    "comment.id": 500_000 + i,
                    "comment.body": f"@keel request {i}",
                    "sender.login": f"person{i}",
                    "comment.user.login": f"person{i}",
                },
            )
            signed = sign_github("issue_comment", payload, SECRET, delivery_id=f"bench-{i}")
            response = await client.post(
                url + "/github/webhook", content=signed.body, headers=signed.headers
            )
            response.raise_for_status()
            latencies.append(time.monotonic() - due)

        await asyncio.gather(*(one(i) for i in range(DELIVERIES)))
    return latencies


def _routed(db_url: str) -> int:
    db = Database.from_url(db_url)
    try:
        return int(
            db.read_sync(lambda s: s.execute(select(func.count()).select_from(SignalRow)).scalar())
            or 0
        )
    finally:
        db.close()


def _run(delay_s: float) -> tuple[list[float], int]:
    state = GitHubState()
    state.add_token(TOKEN, "keel-bot")
    state.add_repo(REPO)
    for i in range(DELIVERIES):
        state.set_permission(REPO, f"person{i}", "write")
    if delay_s:
        state.inject(
            "repos/get-collaborator-permission-level", "timeout", times=10_000, delay_s=delay_s
        )
    with tempfile.TemporaryDirectory() as tmp, serve(create_github_app(state)) as github:
        workdir = Path(tmp)
        config = _config(workdir, github.url)
        with serve(create_app(config, workers=False), lifespan="on") as keel:
            latencies = asyncio.run(_send(keel.url))
            sent_at = time.monotonic()
            # 16 lookups wait at a time (Keel's lookup threads), each delay_s long.
            deadline = time.monotonic() + delay_s * (DELIVERIES / 16 + 1) + 60
            db_url = f"sqlite:///{workdir / 'keel.db'}"
            while _routed(db_url) < DELIVERIES and time.monotonic() < deadline:
                time.sleep(0.5)
            routed = _routed(db_url)
            print(f"routed {routed} in {time.monotonic() - sent_at:.0f}s after the last send")
    return latencies, routed


def main() -> int:
    baseline, base_routed = _run(0.0)
    slow, slow_routed = _run(DELAY_S)
    value = percentile(slow, 0.99) * 1000
    base = percentile(baseline, 0.99) * 1000
    print(f"deliveries {DELIVERIES} at {RATE_PER_S}/s; permission endpoint delayed {DELAY_S}s")
    p50, worst = percentile(slow, 0.5) * 1000, max(slow) * 1000
    print(f"p50 {p50:.1f} ms, p99 {value:.1f} ms, max {worst:.1f} ms")
    print(f"baseline (no delay): p50 {percentile(baseline, 0.5) * 1000:.1f} ms, p99 {base:.1f} ms")
    print(f"routed after the lookups: {slow_routed}/{DELIVERIES} (baseline {base_routed})")
    figure = Figure(
        "github_webhook_p99_ms_permission_delayed_12s",
        value,
        base,
        100.0,
        higher_is_better=False,
        judged_on="value",
    )
    print(figure.result_line())
    return 0 if slow_routed == DELIVERIES else 1


if __name__ == "__main__":
    sys.exit(main())
