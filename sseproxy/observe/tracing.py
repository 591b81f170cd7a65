"""OpenTelemetry: one span per request following the GenAI semantic conventions.

Optional (`pip install 'sseproxy[otel]'`), off unless an OTLP endpoint is configured. The span
continues an incoming W3C `traceparent`, and the upstream request carries the proxy span's
context, so the provider call sits in the app's trace. Nothing here runs per chunk: the span
is opened before the upstream request and finished from the record.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import orjson
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sseproxy import __version__
from sseproxy.core import Verdict
from sseproxy.core.dialects import spec_for

# gen_ai.provider.name values of the semantic conventions, by our route names; a route not
# listed takes its dialect's provider (declared in the dialect's spec).
PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "deepseek": "deepseek",
    "groq": "groq",
    "mistral": "mistral_ai",
    "xai": "x_ai",
    "openrouter": "openrouter",
    "ollama": "ollama",
    "bedrock": "aws.bedrock",
    "cohere": "cohere",
    "azure": "azure.ai.openai",
    "vertex": "gcp.vertex_ai",
    "perplexity": "perplexity",
}


DEFAULT_PORTS = {"http": 80, "https": 443}
# Where each request parameter sits in the request bodies of the dialects, first match wins.
REQUEST_PARAMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "gen_ai.request.max_tokens": (
        ("max_tokens",),
        ("max_completion_tokens",),
        ("max_output_tokens",),
        ("generationConfig", "maxOutputTokens"),
        ("options", "num_predict"),
    ),
    "gen_ai.request.temperature": (
        ("temperature",),
        ("generationConfig", "temperature"),
        ("options", "temperature"),
    ),
    "gen_ai.request.top_p": (("top_p",), ("generationConfig", "topP"), ("options", "top_p")),
}
# A client sends these; anything beyond is not a real parameter value.
MAX_REQUEST_TOKENS = 100_000_000
# A request body is parsed for its parameters only when it is at most this large.
REQUEST_SNIFF_BYTES = 4 * 1024 * 1024


def parse_request(body: bytes) -> Mapping[str, Any] | None:
    """The client's JSON request body as a mapping, or None (not JSON, too large, not an
    object)."""
    if not body or len(body) > REQUEST_SNIFF_BYTES or body.lstrip()[:1] != b"{":
        return None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def server_attributes(upstream: Any) -> dict[str, Any]:
    """`server.address` / `server.port` of the upstream URL; its userinfo never leaves."""
    if not isinstance(upstream, str):
        return {}
    try:
        parts = urlsplit(upstream)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a malformed port
        return {}
    out: dict[str, Any] = {}
    if parts.hostname:
        out["server.address"] = parts.hostname
    if port is not None:
        out["server.port"] = port
    return out


def _dig(mapping: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = mapping
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def request_attributes(request: Mapping[str, Any] | None) -> dict[str, Any]:
    """GenAI request parameters from the client's parsed JSON request body (any dialect's
    spelling: OpenAI, Anthropic, Gemini's generationConfig, Ollama's options). Values of the
    wrong type or out of range are left out: the client controls them."""
    if not isinstance(request, Mapping):
        return {}
    out: dict[str, Any] = {}
    for attribute, paths in REQUEST_PARAMS.items():
        for path in paths:
            value = _dig(request, path)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if attribute == "gen_ai.request.max_tokens":
                if isinstance(value, int) and 0 <= value <= MAX_REQUEST_TOKENS:
                    out[attribute] = value
            elif math.isfinite(value) and 0 <= value <= 100:
                out[attribute] = float(value)
            break
    stream = request.get("stream")
    if isinstance(stream, bool):
        out["gen_ai.request.stream"] = stream
    return out


# The cache-write count's name in the GenAI conventions (open-telemetry/
# semantic-conventions-genai #440), and the older name it replaced, still emitted beside it:
# backends and dashboards written against the older conventions read only that one.
CACHE_WRITE = "gen_ai.usage.cache_write.input_tokens"
CACHE_WRITE_OLD = "gen_ai.usage.cache_creation.input_tokens"


def usage_attributes(verdict: Verdict) -> dict[str, Any]:
    usage = verdict.usage
    if usage is None:
        return {}
    written = usage.cache_write_tokens
    values = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
        CACHE_WRITE: written,
        CACHE_WRITE_OLD: written,
        "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
    }
    return {
        k: v
        for k, v in values.items()
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_REQUEST_TOKENS
    }


def non_negative(value: Any) -> float | None:
    """A finite, non-negative number as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def log_ids(span: Any) -> dict[str, str]:
    """`trace_id` / `span_id` in hex for the request's record (empty for a non-recording or
    invalid span), so that logs and traces join."""
    context = span.get_span_context() if span is not None else None
    if context is None or not context.is_valid:
        return {}
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
    }


class Tracing:
    def __init__(self, exporter: SpanExporter, service_name: str = "sseproxy") -> None:
        resource = Resource.create({"service.name": service_name, "service.version": __version__})
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("sseproxy", __version__)
        self.propagator = TraceContextTextMapPropagator()

    @classmethod
    def otlp(cls, endpoint: str, service_name: str = "sseproxy") -> Tracing:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return cls(OTLPSpanExporter(endpoint=endpoint), service_name)

    def start(
        self, incoming: Any, outgoing: MutableMapping[str, str], method: str, path: str
    ) -> trace.Span:
        """Open the request's span (a child of any incoming traceparent) and put its own
        context into the upstream request's headers."""
        parent = self.propagator.extract(carrier=dict(incoming.items()))
        span = self.tracer.start_span(
            f"{method} {path}", context=parent, kind=SpanKind.CLIENT, start_time=time.time_ns()
        )
        for name in ("traceparent", "tracestate"):
            outgoing.pop(name, None)
        self.propagator.inject(outgoing, context=trace.set_span_in_context(span))
        return span

    def start_child(self, parent: trace.Span, name: str) -> trace.Span:
        """A span under `parent`: a WebSocket session's turn."""
        return self.tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            start_time=time.time_ns(),
        )

    def end(
        self,
        span: trace.Span,
        verdict: Verdict,
        fields: Mapping[str, Any],
        request: Mapping[str, Any] | bytes | None = None,
    ) -> None:
        """Finish the span from the record's `fields`. `request` is the client's JSON request
        body, parsed or as bytes (or None): its max tokens, temperature, top_p and stream
        become `gen_ai.request.*` attributes."""
        if isinstance(request, bytes):
            request = parse_request(request)
        spec = spec_for(verdict.dialect)
        operation = spec.otel_operation  # None: not a GenAI call we recognise
        model = fields.get("model")
        if operation is not None:
            span.update_name(f"{operation} {model}" if model else operation)
        provider = PROVIDERS.get(fields.get("route") or "") or spec.otel_provider
        finish = [r for r in (verdict.finish_reasons or (verdict.finish_reason,)) if r]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.response.model": fields.get("response_model"),
            "gen_ai.response.id": verdict.response_id,
            "gen_ai.response.finish_reasons": finish or None,
            "http.response.status_code": fields.get("status"),
            "sseproxy.state": str(verdict.state),
            "sseproxy.dialect": str(verdict.dialect),
            "sseproxy.interruption": verdict.interruption.reason if verdict.interruption else None,
            "sseproxy.last_event": verdict.last_event,
            "sseproxy.anomalies": sorted(verdict.anomalies) or None,
            "sseproxy.request_id": fields.get("request_id"),
        }
        # The convention's first chunk is any generated chunk (semantic-conventions-genai #306);
        # the first *content* is sseproxy's own attribute beside it.
        first_chunk = non_negative(fields.get("first_chunk_ms"))
        if first_chunk is not None:
            attributes["gen_ai.response.time_to_first_chunk"] = first_chunk / 1000
        ttft = non_negative(fields.get("ttft_ms"))
        if ttft is not None:
            attributes["sseproxy.time_to_first_content"] = ttft / 1000
        if verdict.fallback is not None and verdict.fallback.text_model is not None:
            attributes["sseproxy.text_model"] = verdict.fallback.text_model
        speed = fields.get("output_tokens_per_s")
        attributes["sseproxy.output_tokens_per_s"] = non_negative(speed)
        attributes.update(usage_attributes(verdict))
        attributes.update(server_attributes(fields.get("upstream")))
        attributes.update(request_attributes(request))
        if "gen_ai.request.stream" not in attributes and isinstance(fields.get("stream"), bool):
            attributes["gen_ai.request.stream"] = fields["stream"]
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        start_ns = getattr(span, "start_time", None) or time.time_ns()
        for name, key in (
            ("sseproxy.first_byte", "ttfb_ms"),
            ("sseproxy.first_chunk", "first_chunk_ms"),
            ("sseproxy.first_content", "ttft_ms"),
        ):
            value = fields.get(key)
            if isinstance(value, int | float):
                span.add_event(name, timestamp=start_ns + int(value * 1e6))
        if str(verdict.state) != "completed":
            error = verdict.error
            description = error.message if error and error.message else str(verdict.state)
            span.set_status(Status(StatusCode.ERROR, description))
            span.set_attribute("error.type", (error.type if error else None) or str(verdict.state))
        duration = fields.get("duration_ms")
        end_ns = start_ns + int(duration * 1e6) if isinstance(duration, int | float) else None
        span.end(end_time=end_ns)

    def shutdown(self) -> None:
        self.provider.shutdown()
