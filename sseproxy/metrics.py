"""Prometheus metrics, fed from each request's verdict. Label values are bounded by design:
dialects, states, categories and anomaly names are our own vocabularies; a model is a label
only when the config allows it by name, else "other"."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .core import Verdict

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# Latencies of LLM streams: first bytes in milliseconds to seconds, whole answers up to minutes.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TOKEN_KINDS = ("input", "output", "reasoning", "cached")


class Metrics:
    def __init__(self, models: Iterable[str] = ()) -> None:
        self.registry = CollectorRegistry()
        self.models = frozenset(models)
        r = self.registry
        self.requests = Counter(
            "sseproxy_requests",
            "Requests by how they ended",
            ["dialect", "state", "finish_category", "status_class", "model"],
            registry=r,
        )
        self.anomalies = Counter(
            "sseproxy_anomalies", "Anomalies seen in streams", ["anomaly"], registry=r
        )
        self.ttfb = Histogram(
            "sseproxy_ttfb_seconds",
            "Time to upstream response headers",
            ["dialect"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "sseproxy_ttft_seconds",
            "Time to the first content delta",
            ["dialect"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "sseproxy_duration_seconds",
            "Whole request",
            ["dialect"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.max_gap = Histogram(
            "sseproxy_max_gap_seconds",
            "Longest silence between upstream chunks",
            ["dialect"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.active = Gauge("sseproxy_active_streams", "Requests in flight", registry=r)
        self.upstream_bytes = Counter(
            "sseproxy_upstream_bytes",
            "Response bytes received from upstreams",
            ["dialect"],
            registry=r,
        )
        self.tokens = Counter(
            "sseproxy_tokens", "Tokens reported by providers", ["dialect", "kind"], registry=r
        )

        self.sink_errors = Counter(
            "sseproxy_sink_errors", "Sinks that raised on a record", ["sink"], registry=r
        )

    def sink_failed(self, sink: str) -> None:
        self.sink_errors.labels(sink).inc()

    def model_label(self, model: str | None) -> str:
        return model if model in self.models else "other"

    def observe(self, verdict: Verdict, status: int | None, fields: dict[str, Any]) -> None:
        dialect = str(verdict.dialect)
        status_class = f"{status // 100}xx" if status else "none"
        self.requests.labels(
            dialect,
            str(verdict.state),
            str(verdict.finish_category or "none"),
            status_class,
            self.model_label(fields.get("model")),
        ).inc()
        for name, count in verdict.anomalies.items():
            self.anomalies.labels(name).inc(count)
        for histogram, key in (
            (self.ttfb, "ttfb_ms"),
            (self.ttft, "ttft_ms"),
            (self.duration, "duration_ms"),
            (self.max_gap, "max_gap_ms"),
        ):
            value = fields.get(key)
            if isinstance(value, int | float):
                histogram.labels(dialect).observe(value / 1000)
        self.upstream_bytes.labels(dialect).inc(verdict.bytes)
        usage = verdict.usage
        if usage is not None:
            for kind, value in zip(
                TOKEN_KINDS,
                (
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.reasoning_tokens,
                    usage.cached_tokens,
                ),
                strict=True,
            ):
                if value:
                    self.tokens.labels(dialect, kind).inc(value)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
