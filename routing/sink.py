"""Where ingress puts each delivery: the port every provider's adapter hands its outcomes to,
and its implementation by routing's intake."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from routing.intake import Router
from routing.questions import offered_options
from routing.result import IngestResult
from routing.signal import Ignored, Signal

log = logging.getLogger(__name__)


class SignalSink(Protocol):
    """Where ingress puts each delivery; returns once it is durably recorded."""

    async def accept(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult: ...


@runtime_checkable
class ChoiceSource(Protocol):
    """A sink that can also list a question's options as a person searches them (a Slack
    select with more options than it can show)."""

    def choices(self, name: str, typed: str) -> Sequence[tuple[str, str]]: ...


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

    def choices(self, name: str, typed: str) -> Sequence[tuple[str, str]]:
        """(label, value) of the options of the choice ``name`` that match ``typed``."""
        return offered_options(self.router.policy, name, typed)
