"""Prometheus metrics, fed from each request's verdict. Label values are bounded by design:
routes come from the config, dialects, states, categories and anomaly names are our own
vocabularies; a model is a label only when the config allows it by name, else "other".

Series are created when first used, so that a proxy that has served nothing exports almost
nothing (the exposition was 1.08 MB at startup when every combination existed at zero). The
exceptions, because a counter series that appears already holding its first increment is
invisible to `rate()` and `increase()`:
- `sseproxy_impossible_values_total{field}` exists at zero from startup (an alert fires on
  its `increase()` > 0, so its very first increment must be seen);
- the first request of a (route, dialect, model) creates every outcome of that combination
  at zero (`OUTCOMES`), so the alerts' failure shares see each failure after it.
Nothing here knows a dialect by name: what differs per dialect is read from its DialectSpec.

The two streaming histograms of the OpenTelemetry GenAI conventions are exported under their
Prometheus names (the OTel name, dots as underscores, the unit as suffix), since the proxy
emits no OTel metrics: `gen_ai_client_operation_time_to_first_chunk_seconds` (to the first
chunk of any kind) and `gen_ai_client_operation_time_per_output_chunk_seconds` (between
content chunks, "from the end of the previous output chunk to the end of the current one";
one observation per chunk, counted per stream in O(1) memory by `core.pacing.ChunkTimes` and
merged when the stream ends). Their labels are this module's (route, dialect, model), not
the conventions' attributes: bounded by the config.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, choose_encoder
from prometheus_client.registry import Collector

from sseproxy import __version__
from sseproxy.core import FinishCategory, State, Verdict
from sseproxy.core.dialects import spec_for
from sseproxy.core.pacing import CHUNK_BUCKETS, ChunkTimes
from sseproxy.core.resume import ResumeVerdict
from sseproxy.observe.log_writer import DROPPED, DropCounter

__all__ = ["CONTENT_TYPE_LATEST", "TOKEN_KINDS", "Metrics"]

# Latencies of LLM streams: first bytes in milliseconds to seconds, whole answers up to minutes.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Generation speed, tokens per second: slow local models to the fastest hosted inference.
SPEED_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 2000)
# Faster than any model generates: a bad usage object or a zero-length content span.
MAX_TOKENS_PER_SECOND = 1_000_000
# Non-overlapping: input_uncached + input_cached = the prompt, output_reasoning +
# output_visible = everything generated. (Providers' own `input` includes cached tokens and
# OpenAI's `output` includes reasoning tokens; summing those kinds would count tokens twice.)
TOKEN_KINDS = ("input_uncached", "input_cached", "output_reasoning", "output_visible")
# More tokens than any model's context in one request is a provider bug or a hostile peer.
MAX_TOKENS = 100_000_000
# Values a peer can send that no real stream has; each is dropped and counted by field.
IMPOSSIBLE_FIELDS = (
    "tokens",
    "bytes",
    "ttfb_ms",
    "ttft_ms",
    "first_chunk_ms",
    "duration_ms",
    "max_gap_ms",
    "output_tokens_per_s",
)
_S = State
_F = FinishCategory
# The (state, finish_category, status_class) outcomes the core and the shell produce, made to
# exist at zero with the first request of each route, dialect and model label. The full
# product would be ~2,600 series per combination, nearly all of them impossible.
OUTCOMES: tuple[tuple[str, str, str], ...] = (
    *((_S.COMPLETED, c, "2xx") for c in (_F.STOP, _F.TOOL_USE)),
    *(
        (_S.INCOMPLETE, c, "2xx")
        for c in (_F.LENGTH, _F.CONTENT_FILTER, _F.REFUSAL, _F.PAUSE, _F.OTHER)
    ),
    (_S.FAILED, _F.ERROR, "2xx"),
    (_S.INTERRUPTED, "none", "2xx"),
    *((_S.UNCONFIRMED, c, "2xx") for c in (_F.STOP, _F.TOOL_USE, _F.LENGTH)),
    (_S.CANCELLED, "none", "2xx"),
    (_S.CANCELLED, "none", "none"),
    *((_S.HTTP_ERROR, c, s) for c in ("none", _F.ERROR) for s in ("4xx", "5xx")),
)

NO_ROUTE_OUTCOMES = tuple(o for o in OUTCOMES if o[0] is _S.HTTP_ERROR)
# The record's latency fields, in the order of _Children.latency.
LATENCY_FIELDS = ("ttfb_ms", "ttft_ms", "duration_ms", "max_gap_ms", "first_chunk_ms")
# Label children remembered per Metrics: far more than the bounded label values can make.
MAX_CACHED_CHILDREN = 4096
# The labels every per-request family carries, so that a dashboard filters each panel by them.
REQUEST_LABELS = ("route", "dialect", "model")
# The `verdict` label of a resume link: our own vocabulary (core/resume.py).
RESUME_VERDICTS = frozenset(v.value for v in ResumeVerdict)


@dataclass(frozen=True, slots=True)
class _Children:
    """One (route, dialect, model)'s series, bound once: latency histograms, output speed,
    bytes and token counters, and how its dialect counts reasoning tokens."""

    latency: tuple[Any, ...]
    output_speed: Any
    upstream_bytes: Any
    tokens: Mapping[str, Any]
    output_includes_reasoning: bool


def _tokens(value: int | None) -> int | None:
    """A token count, or None when absent; raises ValueError when impossible."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKENS:
        raise ValueError(value)
    return value


def token_kinds(usage: Any, output_includes_reasoning: bool = True) -> dict[str, int]:
    """Split a verdict's Usage into the non-overlapping TOKEN_KINDS; ValueError if impossible
    (a negative or absurd count, more cached than input, more reasoning than an output count
    that includes it). `output_includes_reasoning` is the dialect's DialectSpec flag."""
    inputs, cached = _tokens(usage.input_tokens), _tokens(usage.cached_tokens) or 0
    output, reasoning = _tokens(usage.output_tokens), _tokens(usage.reasoning_tokens) or 0
    out: dict[str, int] = {}
    if inputs is not None:
        if cached > inputs:
            raise ValueError(cached)
        out["input_uncached"] = inputs - cached
    if cached:
        out["input_cached"] = cached
    if reasoning:
        out["output_reasoning"] = reasoning
    if output is not None:
        if not output_includes_reasoning:
            out["output_visible"] = output
        elif reasoning > output:
            raise ValueError(reasoning)
        else:
            out["output_visible"] = output - reasoning
    return out


def output_includes_reasoning(dialect: Any) -> bool:
    """The dialect's DialectSpec says so; a dialect without a spec counts like most do."""
    try:
        return spec_for(dialect).output_includes_reasoning
    except KeyError:
        return True


CLOSE_CODES = frozenset(range(1000, 1016))


class ChunkHistogram(Collector):
    """A histogram fed whole streams' bucket counts (`ChunkTimes`) rather than one value at a
    time: the relay counts each chunk into a few integers, and only the stream's end touches
    the shared series. Label values are the bounded REQUEST_LABELS."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name, self.documentation = name, documentation
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def merge(self, labels: tuple[str, ...], times: ChunkTimes) -> None:
        counts, total = self.series.setdefault(labels, ([0] * len(times.counts), [0.0]))
        for i, n in enumerate(times.counts):
            counts[i] += n
        total[0] += times.total

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=REQUEST_LABELS)
        bounds = [*(str(float(b)) for b in CHUNK_BUCKETS), "+Inf"]
        for labels, (counts, total) in self.series.items():
            cumulative, buckets = 0, []
            for bound, n in zip(bounds, counts, strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            family.add_metric(list(labels), buckets, total[0])
        yield family

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=REQUEST_LABELS)]


class RecordsDropped(Collector):
    """`sseproxy_records_dropped_total`: log lines the output never got (a reader that
    stopped, past the log queue's bound; a failing output). The log's writer counts them for
    the process; this reads its count at each scrape, at zero from startup."""

    def __init__(self, counter: DropCounter = DROPPED) -> None:
        self.counter = counter

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "sseproxy_records_dropped",
            "Log records dropped: past the log queue's bound while the output took none, "
            "or refused by the output",
            value=self.counter.total,
        )


class Metrics:
    def __init__(
        self, models: Iterable[str] = (), routes: Iterable[str] = (), *, process: bool = True
    ) -> None:
        """`routes`: the configured route names (the `route` label's values, plus "none" for
        requests no route matched). `process`: add the process, platform and GC collectors."""
        # `*_created` samples doubled the exposition and no dashboard or alert reads them
        # (prometheus_client >= 0.18; a process-wide switch, and this process is the proxy).
        disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated upstream
        self.registry = CollectorRegistry()
        self.models = frozenset(models)
        self.routes = frozenset(routes)
        r = self.registry
        self.requests = Counter(
            "sseproxy_requests",
            "Requests by how they ended",
            ["route", "dialect", "state", "finish_category", "status_class", "model"],
            registry=r,
        )
        self.anomalies = Counter(
            "sseproxy_anomalies",
            "Anomalies seen in streams",
            [*REQUEST_LABELS, "anomaly"],
            registry=r,
        )
        self.impossible = Counter(
            "sseproxy_impossible_values",
            "Values from a peer that no real stream has, left out of the other metrics",
            ["field"],
            registry=r,
        )
        self.ttfb = Histogram(
            "sseproxy_ttfb_seconds",
            "Time to upstream response headers",
            REQUEST_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "sseproxy_ttft_seconds",
            "Time to the first content delta",
            REQUEST_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_chunk = Histogram(
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "GenAI conventions: time to the first chunk of the response, of any kind",
            REQUEST_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.chunk_times = ChunkHistogram(
            "gen_ai_client_operation_time_per_output_chunk_seconds",
            "GenAI conventions: time between output chunks, from the end of one to the next's",
        )
        r.register(self.chunk_times)
        self.duration = Histogram(
            "sseproxy_duration_seconds",
            "Whole request",
            REQUEST_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.max_gap = Histogram(
            "sseproxy_max_gap_seconds",
            "Longest silence between upstream chunks",
            REQUEST_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.output_speed = Histogram(
            "sseproxy_output_tokens_per_second",
            "Output tokens (from usage) over the time from first to last content delta",
            REQUEST_LABELS,
            buckets=SPEED_BUCKETS,
            registry=r,
        )
        self.active = Gauge("sseproxy_active_streams", "Requests in flight", registry=r)
        self.upstream_bytes = Counter(
            "sseproxy_upstream_bytes",
            "Response bytes received from upstreams",
            REQUEST_LABELS,
            registry=r,
        )
        self.tokens = Counter(
            "sseproxy_tokens",
            "Tokens reported by providers, by non-overlapping kind",
            [*REQUEST_LABELS, "kind"],
            registry=r,
        )
        # Label children bound once (prometheus_client's `labels()` costs ~2 µs a call).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._per_request: dict[tuple[str, str, str], _Children] = {}
        self.sink_errors = Counter(
            "sseproxy_sink_errors", "Sinks that raised on a record", ["sink"], registry=r
        )
        self.links = Counter(
            "sseproxy_stream_links",
            "Requests linked to an earlier stream: resumes by verdict, and retries",
            [*REQUEST_LABELS, "kind", "verdict"],
            registry=r,
        )
        self.sessions = Counter(
            "sseproxy_websocket_sessions",
            "WebSocket sessions by how they closed (each turn is also counted in requests)",
            ["route", "closed_by", "close_code"],
            registry=r,
        )
        r.register(RecordsDropped())
        Info("sseproxy_build", "The running sseproxy", registry=r).info({"version": __version__})
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            if GC_COLLECTOR is not None:
                GCCollector(registry=r)
        # At zero from startup: SseproxyImpossibleValues fires on increase() > 0.
        self._impossible = {field: self.impossible.labels(field) for field in IMPOSSIBLE_FIELDS}

    def session_finished(self, record: Mapping[str, Any]) -> None:
        """Count one WebSocket session. The close code is a peer's: a label only when it is
        one of the RFC 6455 codes (1000-1015), else "other" (bounded), "none" without one."""
        code = record.get("close_code")
        label = "none" if code is None else str(code) if code in CLOSE_CODES else "other"
        closed_by = record.get("closed_by")
        by = closed_by if closed_by in ("client", "upstream", "proxy") else "none"
        self.sessions.labels(self.route_label(record.get("route")), by, label).inc()

    def sink_failed(self, sink: str) -> None:
        self.sink_errors.labels(sink).inc()

    def model_label(self, model: str | None) -> str:
        return model if model in self.models else "other"

    def route_label(self, route: Any) -> str:
        return route if isinstance(route, str) and route in self.routes else "none"

    def observe(
        self,
        verdict: Verdict,
        status: int | None,
        fields: Mapping[str, Any],
        chunk_times: ChunkTimes | None = None,
    ) -> None:
        """Count one finished request. Never raises on what a peer sent: impossible values
        are left out and counted in sseproxy_impossible_values_total. `chunk_times`: the
        times between its output chunks (the shell's clock)."""
        dialect = str(verdict.dialect)
        status_class = f"{status // 100}xx" if isinstance(status, int) and status > 0 else "none"
        route = self.route_label(fields.get("route"))
        model = self.model_label(fields.get("model"))
        key = (route, dialect, model)
        children = self._per_request.get(key) or self._first_request(key, verdict.dialect)
        self._child(
            self.requests,
            (
                route,
                dialect,
                str(verdict.state),
                str(verdict.finish_category or "none"),
                status_class,
                model,
            ),
        ).inc()
        for name, count in verdict.anomalies.items():
            if isinstance(count, int) and count > 0:
                self._child(self.anomalies, (*key, name)).inc(count)
        resume, retry = fields.get("resume"), fields.get("retry")
        if isinstance(resume, Mapping) and resume.get("verdict") in RESUME_VERDICTS:
            self._child(self.links, (*key, "resume", resume["verdict"])).inc()
        if retry is not None:
            self._child(self.links, (*key, "retry", "regenerated")).inc()
        for histogram, field in zip(children.latency, LATENCY_FIELDS, strict=True):
            value = fields.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if math.isfinite(value) and value >= 0:
                    histogram.observe(value / 1000)
                else:
                    self._impossible[field].inc()
        if chunk_times is not None and chunk_times.count:
            self.chunk_times.merge(key, chunk_times)
        speed = fields.get("output_tokens_per_s")
        if isinstance(speed, int | float) and not isinstance(speed, bool):
            if math.isfinite(speed) and 0 <= speed <= MAX_TOKENS_PER_SECOND:
                children.output_speed.observe(speed)
            else:
                self._impossible["output_tokens_per_s"].inc()
        if verdict.bytes >= 0:
            children.upstream_bytes.inc(verdict.bytes)
        else:
            self._impossible["bytes"].inc()
        if verdict.usage is not None:
            try:
                kinds = token_kinds(verdict.usage, children.output_includes_reasoning)
            except ValueError:
                self._impossible["tokens"].inc()
            else:
                for kind, value in kinds.items():
                    if value:
                        children.tokens[kind].inc(value)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """`metric.labels(*labels)`, remembered: label values are bounded vocabularies, and
        the cache is bounded too (past MAX_CACHED_CHILDREN, children are looked up as before)."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = metric.labels(*labels)
            if len(self._children) < MAX_CACHED_CHILDREN:
                self._children[key] = child
        return child

    def _first_request(self, key: tuple[str, str, str], dialect: Any) -> _Children:
        """The series of a (route, dialect, model) not seen before: every outcome it can have
        at zero (see the module docstring), and its other series bound once."""
        route, dialect_label, model = key
        # Without a route the proxy answers itself (404, 405, 503): only http_error.
        for state, category, status_class in OUTCOMES if route != "none" else NO_ROUTE_OUTCOMES:
            self.requests.labels(
                route, dialect_label, str(state), str(category), status_class, model
            )
        children = _Children(
            latency=tuple(
                h.labels(*key)
                for h in (self.ttfb, self.ttft, self.duration, self.max_gap, self.first_chunk)
            ),
            output_speed=self.output_speed.labels(*key),
            upstream_bytes=self.upstream_bytes.labels(*key),
            tokens={kind: self.tokens.labels(*key, kind) for kind in TOKEN_KINDS},
            output_includes_reasoning=output_includes_reasoning(dialect),
        )
        if len(self._per_request) < MAX_CACHED_CHILDREN:
            self._per_request[key] = children
        return children

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition and its content type: OpenMetrics when `accept` asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
