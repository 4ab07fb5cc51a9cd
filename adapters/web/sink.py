"""Where ingress puts each delivery: the port, and ``keel serve``'s implementation.

Apart from the routes (``ingress.py``) so that building ``Keel`` (which ``keel worker`` does
too) imports no web framework.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from adapters.web.metrics import Metrics
from routing.intake import IngestResult, Router
from routing.signal import Ignored, Signal

log = logging.getLogger(__name__)


class SignalSink(Protocol):
    """Where ingress puts each delivery; returns once it is durably recorded."""

    async def accept(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult: ...


class RoutedSink:
    """The sink of ``keel serve``: routing's intake, with a log line and the ack latency."""

    def __init__(self, router: Router, metrics: Metrics) -> None:
        self.router = router
        self.metrics = metrics

    async def accept(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult:
        started = time.monotonic()
        result = await self.router.ingest(
            outcome, provider=provider, delivery_id=delivery_id, raw_kind=raw_kind
        )
        log.info(
            "signal %s: %s (%s)",
            result.signal_id,
            result.decision,
            result.reason or "-",
            extra={
                "signal_id": result.signal_id,
                "delivery_id": delivery_id,
                "task_id": result.task_id,
            },
        )
        self.metrics.observe_ack(time.monotonic() - started, provider)
        return result
