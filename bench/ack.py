"""Time to first acknowledgement: a signed Slack mention in, the 👀 reaction out.

``keel serve`` (SQLite, in-process workers answering each task at once with the scripted
model) receives 200 mentions on distinct threads at 10 per second. The Slack emulator, in its
own process, stamps each ``reactions.add`` on arrival with the machine-wide monotonic clock;
the figure is arrival minus the moment the mention was sent. Baseline, same run: one direct
``reactions.add`` round trip to the emulator (the floor any acknowledgement pays).
Target: p99 <= 1000 ms. Each mention must get exactly one 👀; a missing one counts as the
whole 30 s wait.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.common import Figure, percentile
from bench.emulators import BOT_TOKEN, CHANNEL, Emulators, message_ts, start_emulators
from bench.world import serve_keel, slack_mention

MENTIONS = 200
RATE_PER_S = 10.0
WAIT_S = 30.0
FLOOR_CALLS = 50


async def send_mentions(url: str) -> dict[str, float]:
    """Mention i is sent at i / rate; returns each message ts with its send time."""
    sent: dict[str, float] = {}
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=10) as client:
        for i in range(MENTIONS):
            await asyncio.sleep(max(0.0, started + i / RATE_PER_S - time.monotonic()))
            signed = slack_mention(i)
            sent[message_ts(i)] = time.monotonic()
            response = await client.post(url + "/slack/events", content=signed.body,
                                         headers=signed.headers)
            response.raise_for_status()
    return sent


def wait_for_reactions(emulators: Emulators, count: int) -> list[tuple[str, float]]:
    deadline = time.monotonic() + WAIT_S
    arrivals = emulators.reactions()
    while len(arrivals) < count and time.monotonic() < deadline:
        time.sleep(0.2)
        arrivals = emulators.reactions()
    return arrivals


def floor_seconds(emulators: Emulators) -> list[float]:
    """Direct reactions.add calls on seeded messages that Keel never saw."""
    samples = []
    with httpx.Client(timeout=10) as client:
        for i in range(MENTIONS, MENTIONS + FLOOR_CALLS):
            started = time.monotonic()
            client.post(
                emulators.slack_url + "/api/reactions.add",
                data={"channel": CHANNEL, "timestamp": message_ts(i), "name": "eyes"},
                headers={"Authorization": f"Bearer {BOT_TOKEN}"},
            ).raise_for_status()
            samples.append(time.monotonic() - started)
    return samples


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="keel-bench-ack-") as name:
        emulators = start_emulators(messages=MENTIONS + FLOOR_CALLS)
        try:
            keel, url, _ = serve_keel(Path(name), emulators)
            try:
                sent = asyncio.run(send_mentions(url))
                arrivals = wait_for_reactions(emulators, MENTIONS)
            finally:
                keel.stop()
            floor = floor_seconds(emulators)
        finally:
            emulators.stop()
    first: dict[str, float] = {}
    for ts, at in arrivals:
        first.setdefault(ts, at)
    latencies = [first[ts] - at for ts, at in sent.items() if ts in first]
    repeats = sum(n - 1 for n in Counter(ts for ts, _ in arrivals).values())
    missing = len(sent) - len(latencies)
    print(f"  {len(latencies)} of {len(sent)} mentions got their 👀 ({missing} missing, "
          f"{repeats} repeated)")
    # A missing 👀 counts as the whole wait, so a loss can never pass for a fast ack.
    latencies += [WAIT_S] * missing
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        print(Figure(f"ack_{name}_first_reaction_ms", 1000 * percentile(latencies, fraction),
                     1000 * percentile(floor, fraction), 1000, higher_is_better=False,
                     judged_on="value").result_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
