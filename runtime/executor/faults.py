"""Crash injection for the recovery tests, read from the environment and nowhere else.

``KEEL_FAULT=<point>[#n]`` SIGKILLs this process the n-th time (default first) ``point`` is
reached; ``KEEL_FAULT_TRACE=<file>`` appends every point reached, so a test can enumerate them.
Both are unset in production, where ``hit`` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter


class FaultPlan:
    def __init__(self, point: str | None, nth: int, trace_path: str | None) -> None:
        self._point = point
        self._nth = nth
        self._trace_path = trace_path
        self._seen: Counter[str] = Counter()

    @classmethod
    def from_env(cls) -> FaultPlan:
        spec = os.environ.get("KEEL_FAULT")
        point, _, nth = spec.partition("#") if spec else (None, "", "")
        return cls(point or None, int(nth or 1), os.environ.get("KEEL_FAULT_TRACE"))

    def hit(self, point: str) -> None:
        if self._point is None and self._trace_path is None:
            return
        self._seen[point] += 1
        if self._trace_path:
            with open(self._trace_path, "a", encoding="utf-8") as trace:
                trace.write(f"{point}#{self._seen[point]}\n")
        if point == self._point and self._seen[point] == self._nth:
            os.kill(os.getpid(), signal.SIGKILL)
