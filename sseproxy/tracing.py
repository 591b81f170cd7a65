"""OpenTelemetry: one span per request following the GenAI semantic conventions.

Optional (`pip install 'sseproxy[otel]'`), off unless an OTLP endpoint is configured. The span
continues an incoming W3C `traceparent`, and the upstream request carries the proxy span's
context, so the provider call sits in the app's trace. Nothing here runs per chunk: the span
is opened before the upstream request and finished from the record.
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import __version__
from .core import Verdict
from .core.dialects import spec_for

# gen_ai.provider.name values of the semantic conventions, by our route names.
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

    def end(self, span: trace.Span, verdict: Verdict, fields: dict[str, Any]) -> None:
        dialect = str(verdict.dialect)
        spec = spec_for(verdict.dialect)  # the dialect declares its GenAI names
        operation = spec.otel_operation or "http"
        model = fields.get("model")
        span.update_name(f"{operation} {model}" if model else operation)
        provider = PROVIDERS.get(fields.get("route") or "") or spec.otel_provider
        reasons = verdict.finish_reason
        finish = [r for r in (reasons if isinstance(reasons, list) else [reasons]) if r]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.response.model": fields.get("response_model"),
            "gen_ai.response.id": verdict.response_id,
            "gen_ai.response.finish_reasons": finish or None,
            "gen_ai.usage.input_tokens": verdict.usage.input_tokens if verdict.usage else None,
            "gen_ai.usage.output_tokens": verdict.usage.output_tokens if verdict.usage else None,
            "http.response.status_code": fields.get("status"),
            "sseproxy.state": str(verdict.state),
            "sseproxy.dialect": dialect,
            "sseproxy.interruption": verdict.interruption.reason if verdict.interruption else None,
            "sseproxy.last_event": verdict.last_event,
            "sseproxy.anomalies": sorted(verdict.anomalies) or None,
            "sseproxy.request_id": fields.get("request_id"),
        }
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        start_ns = getattr(span, "start_time", None) or time.time_ns()
        for name, key in (
            ("sseproxy.first_byte", "ttfb_ms"),
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
