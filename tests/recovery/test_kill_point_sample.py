"""The sample of kill points that ``make test`` runs: every kind once, replayable by seed."""

from __future__ import annotations

import pytest

from tests.recovery import restarts
from tests.recovery.restarts import point_kind, sampled

POINTS = [
    "commit:load_context#1",
    "commit:call_model#1",
    "dispatching:call_0_0#1",
    "dispatching:call_1_0#1",
    "dispatching:call_1_1#1",
    "settled:call_0_0#1",
    "commit:call_model#2",
]


def test_sample_has_one_point_of_every_kind_in_the_order_reached_when_not_soaking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(restarts, "SOAKING", False)
    chosen = sampled(POINTS)
    assert sorted(map(point_kind, chosen)) == sorted({point_kind(p) for p in POINTS})
    assert chosen == [p for p in POINTS if p in chosen]


def test_same_seed_gives_the_same_sample_when_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restarts, "SOAKING", False)
    monkeypatch.setenv("KEEL_SOAK_SEED", "7")
    assert sampled(POINTS) == sampled(POINTS)


def test_every_point_is_killed_when_soaking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restarts, "SOAKING", True)
    assert sampled(POINTS) == POINTS
