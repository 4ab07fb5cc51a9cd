"""When a model call that met a provider outage is tried again."""

from __future__ import annotations

from runtime.executor.outage import wait_s


def test_retries_come_seconds_apart_then_park_doubling_to_5_minutes_when_the_outage_lasts() -> None:
    assert [wait_s(n, None) for n in range(1, 10)] == [2, 4, 8, 30, 60, 120, 240, 300, 300]


def test_no_retry_comes_sooner_than_the_provider_asked_when_it_says_retry_after() -> None:
    assert wait_s(1, 20.0) == 20.0
    assert wait_s(5, 20.0) == 60.0


def test_the_park_stays_5_minutes_when_an_outage_lasts_for_days() -> None:
    assert wait_s(5_000, None) == 300.0
