"""Shared pieces of the benchmarks: medians of repeated runs and the RESULT line."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass

PG_URL = os.environ.get("KEEL_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    baseline: float
    target: float
    higher_is_better: bool = True
    ratios: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else 0.0

    @property
    def met(self) -> bool:
        return self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target

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
