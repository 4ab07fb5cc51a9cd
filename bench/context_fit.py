"""Fitting cost: milliseconds to fit a 200-turn transcript into a 128k-token window, per
model call, against a model call's own latency (a 200 ms stand-in, timed in the same run).

The transcript is what a long task leaves: a 4 KB brief, then 200 turns of a sentence, a
read_file call and its output (0.5-20 KB), a follow-up every 20 turns. Fitting it elides old
outputs and plans a compaction (``runtime.executor.fitting.fit``, everything a model call
adds). ``steady`` has a summary at turn 150, as after a compaction; ``full`` has none, the
worst case. Target: under 5% of the stand-in's latency.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import Figure  # noqa: E402
from runtime.executor.fitting import Window, fit  # noqa: E402
from runtime.store.transcripts import TranscriptEntry  # noqa: E402

TURNS = 200
CALLS = 30
STAND_IN_S = 0.2
NOW = datetime(2026, 12, 6, tzinfo=UTC)


def transcript(summary_at: int | None) -> list[TranscriptEntry]:
    rng = random.Random(16)
    entries: list[TranscriptEntry] = []

    def add(key: str, role: str, kind: str, payload: dict[str, Any]) -> None:
        entries.append(TranscriptEntry(len(entries) + 1, key, role, kind, payload, NOW))

    add("brief:t", "user", "brief", {"type": "user_text", "text": "fix the cart " * 330})
    for turn in range(TURNS):
        call_id = f"call_{turn}_0"
        add(f"model:{turn}:0", "assistant", "message",
            {"type": "assistant_text", "text": f"Reading part {turn} of the cart module next."})
        add(f"call:{call_id}", "assistant", "tool_call",
            {"type": "tool_call", "call_id": call_id, "name": "read_file",
             "arguments": {"path": f"src/cart/part{turn}.py"}})
        output = "def line(): return 1\n" * (rng.randint(500, 20_000) // 21)
        add(f"result:{call_id}", "tool", "tool_result",
            {"type": "tool_result", "call_id": call_id, "output": output})
        if turn % 20 == 19:
            text = f"<mailbox_update>also check {turn}</mailbox_update>"
            add(f"mbx:{turn}", "user", "mailbox", {"type": "user_text", "text": text})
        if summary_at == turn:
            add(f"compact:{len(entries)}", "user", "summary",
                {"type": "summary", "text": "Summary of the work so far. " * 40,
                 "through_seq": len(entries), "turn": turn})
    return entries


def fit_ms(entries: list[TranscriptEntry]) -> float:
    window = Window(context_window=128_000, reply_tokens=4_096)
    samples = []
    for _ in range(CALLS):
        started = time.perf_counter()
        fit(entries, fixed_chars=6_000, window=window, chars_per_token=3.7)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def stand_in_ms() -> float:
    async def call() -> float:
        started = time.perf_counter()
        await asyncio.sleep(STAND_IN_S)
        return (time.perf_counter() - started) * 1000

    return statistics.median(asyncio.run(_several(call)))


async def _several(call: Any) -> list[float]:
    return [await call() for _ in range(5)]


def main() -> None:
    baseline = stand_in_ms()
    for name, summary_at in (("steady", 150), ("full", None)):
        value = fit_ms(transcript(summary_at))
        figure = Figure(
            f"context_fit_ms_per_call_{name}", value, baseline, 0.05, higher_is_better=False
        )
        print(figure.result_line())


if __name__ == "__main__":
    main()
