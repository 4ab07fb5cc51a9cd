"""The crash soak: random tasks on workers SIGKILLed at random instants, invariants after each.

The quick pass (``make test``) makes 25 kills per database, at most 0.6 s apart; ``KEEL_SOAK=1``
(``make soak``) makes 1,000 per database, at most 1.2 s apart, and prints the invariant table.
``KEEL_SOAK_SEED`` replays a run; ``KEEL_SOAK_PROGRESS=path`` keeps the latest table in
``path.<engine>`` after every round.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.recovery.soak import Tally, soak

SOAKING = bool(os.environ.get("KEEL_SOAK"))
KILLS = int(os.environ.get("KEEL_SOAK_KILLS", "1000")) if SOAKING else 25
# Seconds between kills at most: the quick pass kills more often to stay short.
MAX_GAP = 1.2 if SOAKING else 0.6


async def test_every_invariant_holds_when_workers_are_killed_at_random_instants(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("KEEL_SOAK_SEED", random.randrange(1 << 30)))
    engine = "postgresql" if db_url.startswith("postgresql") else "sqlite"

    label = f"{engine} (seed {seed})"
    progress = os.environ.get("KEEL_SOAK_PROGRESS")

    def after_round(tally: Tally) -> None:
        if progress:  # the latest table, so a long soak can be read while it runs
            Path(f"{progress}.{engine}").write_text(tally.table(label) + "\n")

    tally = await soak(
        db_url, tmp_path, kills=KILLS, seed=seed, max_gap=MAX_GAP, after_round=after_round
    )

    table = tally.table(label)
    if SOAKING:
        with capsys.disabled():
            print("\n" + table)
    assert tally.kills == KILLS
    assert tally.tasks > 0 and tally.writes > 0
    assert sum(tally.violations.values()) == 0, table + "\n" + "\n".join(tally.examples)
