"""Shared pieces of the benchmarks: medians of repeated runs and the RESULT line."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

PG_URL = os.environ.get("KEEL_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    baseline: float
    target: float
    higher_is_better: bool = True
    ratios: tuple[float, ...] = ()
    # "value": the target is an absolute bound on the value (ms, MB, a count); the baseline
    # and ratio are still printed, for scale.
    judged_on: Literal["ratio", "value"] = "ratio"

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else 0.0

    @property
    def met(self) -> bool:
        judged = self.ratio if self.judged_on == "ratio" else self.value
        return judged >= self.target if self.higher_is_better else judged <= self.target

    def result_line(self) -> str:
        spread = f" min={min(self.ratios):.3f} max={max(self.ratios):.3f}" if self.ratios else ""
        return (
            f"RESULT {self.name} value={self.value:.2f} baseline={self.baseline:.2f} "
            f"ratio={self.ratio:.3f} target={self.target} met={'yes' if self.met else 'no'}{spread}"
        )


def median_figure(
    name: str,
    runs: int,
    measure: Callable[[], tuple[float, float]],
    target: float,
    *,
    higher_is_better: bool = True,
) -> Figure:
    """``measure`` returns (value, baseline) of one interleaved run."""
    pairs = [measure() for _ in range(runs)]
    values = [v for v, _ in pairs]
    baselines = [b for _, b in pairs]
    ratios = tuple(v / b for v, b in pairs if b)
    return Figure(
        name, statistics.median(values), statistics.median(baselines), target,
        higher_is_better, ratios,
    )


def postgres_available() -> bool:
    import psycopg
    from sqlalchemy.engine import make_url

    dsn = make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        psycopg.connect(dsn, connect_timeout=2).close()
    except psycopg.Error:
        return False
    return True


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.99 is p99) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]
