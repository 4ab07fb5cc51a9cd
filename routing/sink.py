"""Where ingress puts each delivery: the port every provider's adapter hands its outcomes to,
and its implementation by routing's intake."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from routing.intake import Router
from routing.result import IngestResult
from routing.signal import Ignored, Signal

log = logging.getLogger(__name__)


class SignalSink(Protocol):
    """Where ingress puts each delivery; returns once it is durably recorded."""

    async def accept(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult: ...


class AckLatency(Protocol):
    """Where the time from a delivery to its durable record is observed (the web metrics)."""

    def observe_ack(self, seconds: float, provider: str) -> None: ...


class RoutedSink:
    """The sink of ``keel serve``: routing's intake, with a log line and the ack latency."""

    def __init__(self, router: Router, metrics: AckLatency) -> None:
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
