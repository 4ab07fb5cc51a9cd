"""A recording SignalSink: the fake at ingress's own port, for transport tests, and the ingress
endpoint those tests post to."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import httpx

from routing.result import IngestResult
from routing.signal import Ignored, Signal
from runtime.ids import SignalId


@dataclass
class RecordingSink:
    """Records every outcome; ``failure`` makes ``accept`` raise as a database outage would."""

    accepted: list[tuple[Signal | Ignored, str, str, str]] = field(default_factory=list)
    failure: Exception | None = None
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def accept(
        self, outcome: Signal | Ignored, *, provider: str, delivery_id: str, raw_kind: str
    ) -> IngestResult:
        if self.failure is not None:
            self.failures.append(delivery_id)
            raise self.failure
        with self.lock:
            self.accepted.append((outcome, provider, delivery_id, raw_kind))
        return IngestResult(SignalId(f"s{len(self.accepted)}"), "drop", "not_addressed", None)


@dataclass(frozen=True, slots=True)
class Ingress:
    """A served ingress route and the sink behind it."""

    url: str
    sink: RecordingSink

    async def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.post(self.url, content=body, headers=headers)
