"""Prometheus metrics: durable counts read from the database at scrape time, plus the
in-process timings and failures the app reports as they happen.

Each app owns its ``Metrics`` (its own CollectorRegistry), so two apps in one process, as in
tests, never share or collide on metric state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from runtime.models.base import Usage
from runtime.store import usage, views
from runtime.store.engine import Database

if TYPE_CHECKING:  # the web framework is imported by build_metrics, which serve calls
    from fastapi import APIRouter, Request

_ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_PHASE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0)


class Metrics:
    """What the app observes in-process; read by the /metrics route."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._phase = Histogram(
            "keel_phase_duration_seconds",
            "Time one executor phase took.",
            ["phase"],
            buckets=_PHASE_BUCKETS,
            registry=self.registry,
        )
        self._ack = Histogram(
            "keel_webhook_ack_seconds",
            "Time from a webhook request arriving to its answer.",
            ["provider"],
            buckets=_ACK_BUCKETS,
            registry=self.registry,
        )
        self._model_call = Histogram(
            "keel_model_call_seconds",
            "Time one model call took, by purpose (turn or compaction).",
            ["purpose"],
            buckets=_PHASE_BUCKETS,
            registry=self.registry,
        )
        self._outbox_failures = Counter(
            "keel_outbox_failures",
            "Outbox posts that failed an attempt.",
            ["surface"],
            registry=self.registry,
        )

        self._redeliveries = Counter(
            "keel_github_redeliveries_requested",
            "Failed GitHub webhook deliveries Keel asked GitHub to redeliver.",
            registry=self.registry,
        )

    def count_redelivery(self) -> None:
        self._redeliveries.inc()

    def observe_phase(self, phase: str, seconds: float) -> None:
        self._phase.labels(phase=phase).observe(seconds)

    def observe_model_call(self, purpose: str, usage: Usage | None, seconds: float) -> None:
        self._model_call.labels(purpose=purpose).observe(seconds)

    def observe_ack(self, seconds: float, provider: str) -> None:
        self._ack.labels(provider=provider).observe(seconds)

    def count_outbox_failure(self, surface: str) -> None:
        self._outbox_failures.labels(surface=surface).inc()


class _CountsCollector(Collector):
    """One scrape's database counts, as metric families."""

    def __init__(self, counts: views.Counts, tokens: dict[str, int]) -> None:
        self.counts = counts
        self.tokens = tokens

    def collect(self) -> Iterator[Metric]:
        signals = CounterMetricFamily(
            "keel_signals", "Signals received, by routing decision.", labels=["decision"]
        )
        for decision, n in sorted(self.counts.signals_by_decision.items()):
            signals.add_metric([decision], n)
        tasks = GaugeMetricFamily("keel_tasks", "Tasks by current status.", labels=["status"])
        for status, n in sorted(self.counts.tasks_by_status.items()):
            tasks.add_metric([status], n)
        tools = CounterMetricFamily(
            "keel_tool_calls", "Tool calls, by settled outcome.", labels=["outcome"]
        )
        for outcome, n in sorted(self.counts.tool_outcomes.items()):
            tools.add_metric([outcome], n)
        tokens = CounterMetricFamily(
            "keel_model_tokens", "Model tokens used, by kind.", labels=["kind"]
        )
        for kind, n in sorted(self.tokens.items()):
            tokens.add_metric([kind], n)
        undelivered = GaugeMetricFamily(
            "keel_outbox_undelivered",
            "Posts the outbox gave up on: neither their thread nor the fallback took them.",
        )
        undelivered.add_metric([], self.counts.outbox_undelivered)
        yield from (signals, tasks, tools, tokens, undelivered)


def render(metrics: Metrics, counts: views.Counts, tokens: dict[str, int] | None = None) -> bytes:
    """The exposition text: in-process families, then this scrape's database counts."""
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(_CountsCollector(counts, tokens or {}))
    return generate_latest(metrics.registry) + generate_latest(scrape)


def build_metrics(
    db: Database,
    metrics: Metrics | None = None,
    *,
    auth: Callable[[Request], Awaitable[None]] | None = None,
) -> APIRouter:
    """``GET /metrics``; pass the app's ``Metrics`` so what it observes is served, and ``auth``
    unless the counts may be read by anyone who can reach the server."""
    from fastapi import APIRouter, Depends
    from starlette.responses import Response

    observed = metrics if metrics is not None else Metrics()
    guard = [Depends(auth)] if auth is not None else []
    router = APIRouter(tags=["metrics"], dependencies=guard)

    @router.get("/metrics", response_class=Response)
    async def scrape() -> Any:
        counts = await db.read(views.counts)
        tokens = await db.read(usage.tokens_by_kind)
        return Response(render(observed, counts, tokens), media_type=CONTENT_TYPE_LATEST)

    return router
