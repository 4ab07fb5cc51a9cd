"""Fixtures the integration tests share, so a stack built the same way in many files is built
in one place (tests that vary its arguments on purpose still build it themselves)."""

from __future__ import annotations

import pytest

from runtime.scheduler import Scheduler
from runtime.store.engine import Database


@pytest.fixture
def scheduler(database: Database) -> Scheduler:
    """The scheduler over the test's database: system clock, default lease."""
    return Scheduler(database)
