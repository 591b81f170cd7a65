"""OpenTelemetry spans: GenAI attributes from the verdict, traceparent continued and forwarded,
and OTLP/HTTP export to a real (local) receiver."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from sseproxy.config import load
from sseproxy.shell.app import create_app
from tests.integration.fake_upstream import Close, Script, Send, Sleep
from tests.streams import chat_chunk, sse

trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from sseproxy.observe.tracing import Tracing  # noqa: E402

PATH = "/v1/chat/completions"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def chat(content=None, finish=None):
    return chat_chunk(content, finish, response_id="chatcmpl-9", model="gpt-x-2026")


USAGE = {
    "id": "chatcmpl-9",
    "choices": [],
    "usage": {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 5},
    },
}


async def spans_of(exporter: InMemorySpanExporter, tracing: Tracing, n: int):
    for _ in range(100):
        tracing.provider.force_flush()
        if len(exporter.get_finished_spans()) >= n:
            break
        await asyncio.sleep(0.02)
    return exporter.get_finished_spans()


async def test_span_per_request_with_genai_attributes(upstream, aiohttp_client, logs) -> None:
    fake, url = upstream
    fake.script(PATH, Script([Send(sse(chat("Hi"), chat(finish="stop"), USAGE, "[DONE]"))]))
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": url}), tracing=tracing))
    resp = await client.post(
        PATH,
        json={"model": "gpt-x", "stream": True, "max_tokens": 99, "temperature": 0.5},
        headers={"traceparent": PARENT},
    )
    await resp.read()
    [span] = await spans_of(exporter, tracing, 1)
    a = span.attributes
    assert span.name == "chat gpt-x"
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["gen_ai.response.model"]) == (
        "chat",
        "gpt-x",
        "gpt-x-2026",
    )
    assert (a["gen_ai.response.id"], tuple(a["gen_ai.response.finish_reasons"])) == (
        "chatcmpl-9",
        ("stop",),
    )
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 7)
    assert a["gen_ai.usage.cache_read.input_tokens"] == 4
    assert a["gen_ai.usage.reasoning.output_tokens"] == 5
    assert "gen_ai.usage.cache_write.input_tokens" not in a  # this usage reports none
    host, port = url.removeprefix("http://").split(":")
    assert (a["server.address"], a["server.port"]) == (host, int(port))
    assert (a["gen_ai.request.stream"], a["gen_ai.request.max_tokens"]) == (True, 99)
    assert a["gen_ai.request.temperature"] == 0.5
    [record] = logs.records()
    assert a["gen_ai.response.time_to_first_chunk"] == record["first_chunk_ms"] / 1000
    assert a["sseproxy.time_to_first_content"] == record["ttft_ms"] / 1000
    assert (a["sseproxy.state"], a["sseproxy.last_event"]) == ("completed", "[DONE]")
    assert [e.name for e in span.events] == [
        "sseproxy.first_byte",
        "sseproxy.first_chunk",
        "sseproxy.first_content",
    ]
    # continued from the incoming traceparent...
    assert format(span.context.trace_id, "032x") == PARENT.split("-")[1]
    assert format(span.parent.span_id, "016x") == PARENT.split("-")[2]
    # ...and the upstream request is a child of the proxy's span
    forwarded = fake.seen[0].headers["traceparent"].split("-")
    assert forwarded[1] == PARENT.split("-")[1] and forwarded[2] == format(
        span.context.span_id, "016x"
    )


async def test_the_first_chunk_is_any_event_and_comes_before_the_first_content(
    upstream, aiohttp_client, logs
) -> None:
    """A Chat stream whose first chunk carries only the role (as OpenAI's do), then content
    0.3 s later: the conventions' time to first chunk counts the role chunk
    (semantic-conventions-genai #306), sseproxy's first content the text."""
    fake, url = upstream
    role = {
        **chat(),
        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}],
    }
    fake.script(
        PATH,
        Script(
            [
                Send(b": keep-alive\n\n"),  # a comment is no chunk of the response
                Send(sse(role)),
                Sleep(0.3),
                Send(sse(chat("Hi"), chat(finish="stop"), "[DONE]")),
            ]
        ),
    )
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": url}), tracing=tracing))
    resp = await client.post(PATH, json={"model": "gpt-x", "stream": True})
    await resp.read()
    [span] = await spans_of(exporter, tracing, 1)
    [record] = logs.records()
    assert record["ttft_ms"] - record["first_chunk_ms"] >= 250
    a = span.attributes
    assert a["gen_ai.response.time_to_first_chunk"] == record["first_chunk_ms"] / 1000
    assert a["gen_ai.response.time_to_first_chunk"] < a["sseproxy.time_to_first_content"]


async def test_interrupted_stream_span_is_an_error(upstream, aiohttp_client, logs) -> None:
    fake, url = upstream
    fake.script(PATH, Script([Send(sse(chat("Hi"))), Close()]))
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": url}), tracing=tracing))
    resp = await client.post(PATH, json={"model": "gpt-x"})
    with pytest.raises(aiohttp.ClientPayloadError):  # the cut reaches the client
        await resp.read()
    [span] = await spans_of(exporter, tracing, 1)
    assert span.status.status_code.name == "ERROR"
    assert (span.attributes["sseproxy.state"], span.attributes["sseproxy.interruption"]) == (
        "interrupted",
        "upstream_closed",
    )


async def test_otlp_http_export_reaches_a_receiver(
    upstream, aiohttp_server, aiohttp_client, logs, monkeypatch
) -> None:
    """As docs/metrics-and-opentelemetry.md says for Phoenix / Langfuse: headers and the project's resource attribute
    come from the standard OTEL_* variables."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic cGs6c2s=")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "openinference.project.name=my-app")
    received: list[ExportTraceServiceRequest] = []
    authorizations: list[str | None] = []

    async def collect(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        authorizations.append(request.headers.get("Authorization"))
        return web.Response(body=b"", content_type="application/x-protobuf")

    receiver_app = web.Application()
    receiver_app.router.add_post("/v1/traces", collect)
    receiver = await aiohttp_server(receiver_app)
    fake, url = upstream
    fake.script(PATH, Script([Send(sse(chat("Hi"), chat(finish="stop"), "[DONE]"))]))
    settings = load(
        None, {}, {"upstream": url, "otel_endpoint": str(receiver.make_url("/v1/traces"))}
    )
    app = create_app(settings)
    client = await aiohttp_client(app)
    await (await client.post(PATH, json={"model": "gpt-x"})).read()
    await client.close()  # cleanup flushes the exporter
    for _ in range(100):
        if received:
            break
        await asyncio.sleep(0.05)
    spans = [
        s for r in received for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans
    ]
    assert [s.name for s in spans] == ["chat gpt-x"]
    attributes = {kv.key: kv.value for kv in spans[0].attributes}
    assert attributes["sseproxy.state"].string_value == "completed"
    assert set(authorizations) == {"Basic cGs6c2s="}
    resource = {
        kv.key: kv.value.string_value for kv in received[0].resource_spans[0].resource.attributes
    }
    assert (resource["openinference.project.name"], resource["service.name"]) == (
        "my-app",
        "sseproxy",
    )


async def test_a_call_that_is_not_genai_has_no_operation_name(
    upstream, aiohttp_client, logs
) -> None:
    """A plain SSE stream (no known dialect) is no GenAI operation: the attribute is omitted,
    never "http"; the span keeps its HTTP name. Upstream userinfo never reaches the span."""
    fake, url = upstream
    fake.script("/events", Script([Send(b"data: tick\n\n")]))
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    with_userinfo = url.replace("http://", "http://alice:s3cret@")
    client = await aiohttp_client(
        create_app(load(None, {}, {"upstream": with_userinfo}), tracing=tracing)
    )
    await (await client.get("/events")).read()
    [span] = await spans_of(exporter, tracing, 1)
    assert "gen_ai.operation.name" not in span.attributes
    assert span.name == "GET /events"
    assert span.attributes["server.address"] == "127.0.0.1"
    assert not any("s3cret" in str(v) or "alice" in str(v) for v in span.attributes.values())


def finished_span(verdict, fields, request):
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    span = tracing.tracer.start_span("POST /x")
    tracing.end(span, verdict, fields, request=request)
    tracing.provider.force_flush()
    [done] = exporter.get_finished_spans()
    return done


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        (
            {"max_tokens": 256, "temperature": 0.2, "top_p": 0.9, "stream": True},
            {
                "gen_ai.request.max_tokens": 256,
                "gen_ai.request.temperature": 0.2,
                "gen_ai.request.top_p": 0.9,
                "gen_ai.request.stream": True,
            },
        ),
        ({"max_completion_tokens": 64}, {"gen_ai.request.max_tokens": 64}),
        (
            {"generationConfig": {"maxOutputTokens": 32, "temperature": 1}},
            {"gen_ai.request.max_tokens": 32, "gen_ai.request.temperature": 1.0},
        ),
        ({"options": {"num_predict": 8}}, {"gen_ai.request.max_tokens": 8}),
        # the client controls these: wrong types and impossible values are left out
        ({"max_tokens": -1, "temperature": "hot", "stream": "yes"}, {}),
        ({"max_tokens": 10**12, "temperature": float("nan"), "top_p": True}, {}),
    ],
)
def test_request_parameters_on_the_span(request_body, expected) -> None:
    from sseproxy.core import Dialect, State, Verdict

    verdict = Verdict(Dialect.OPENAI_CHAT, State.COMPLETED)
    span = finished_span(verdict, {"model": "m"}, request_body)
    got = {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.request.")}
    assert got == {"gen_ai.request.model": "m", **expected}


def test_anthropic_cache_write_under_both_names_and_log_ids() -> None:
    """The cache-write count under the conventions' current name
    (`gen_ai.usage.cache_write.input_tokens`, semantic-conventions-genai #440) and the older
    `cache_creation` one that earlier backends read."""
    from sseproxy.core import Dialect
    from sseproxy.observe.tracing import log_ids
    from tests.streams import verdict_of

    usage = {"input_tokens": 3, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 9}
    start = {"type": "message_start", "message": {"id": "m1", "model": "c", "usage": usage}}
    stop = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
    verdict = verdict_of(
        sse(
            ("message_start", start),
            ("message_delta", stop),
            ("message_stop", {"type": "message_stop"}),
        ),
        Dialect.ANTHROPIC_MESSAGES,
    )
    span = finished_span(verdict, {"upstream": "https://api.anthropic.com"}, None)
    a = span.attributes
    assert (
        a["gen_ai.usage.cache_write.input_tokens"],
        a["gen_ai.usage.cache_creation.input_tokens"],
        a["gen_ai.usage.cache_read.input_tokens"],
    ) == (20, 20, 9)
    assert (a["server.address"], a["server.port"]) == ("api.anthropic.com", 443)
    ids = log_ids(span)
    assert ids == {
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
    }
    assert len(ids["trace_id"]) == 32 and len(ids["span_id"]) == 16
    from opentelemetry.trace import INVALID_SPAN

    assert log_ids(INVALID_SPAN) == {}


def test_output_speed_on_the_span() -> None:
    from sseproxy.core import Dialect, State, Verdict

    verdict = Verdict(Dialect.OPENAI_CHAT, State.COMPLETED)
    span = finished_span(verdict, {"output_tokens_per_s": 55.5}, None)
    assert span.attributes["sseproxy.output_tokens_per_s"] == 55.5
    span = finished_span(verdict, {"output_tokens_per_s": None}, None)
    assert "sseproxy.output_tokens_per_s" not in span.attributes


async def test_the_record_carries_the_spans_ids(upstream, aiohttp_client, logs) -> None:
    """Logs and traces join: with OpenTelemetry on, the record names its trace and span."""
    fake, url = upstream
    fake.script(PATH, Script([Send(sse(chat("Hi"), chat(finish="stop"), "[DONE]"))]))
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": url}), tracing=tracing))
    await (await client.post(PATH, json={}, headers={"traceparent": PARENT})).read()
    [span] = await spans_of(exporter, tracing, 1)
    [record] = await logs.wait(1)
    assert record["trace_id"] == format(span.context.trace_id, "032x") == PARENT[3:35]
    assert record["span_id"] == format(span.context.span_id, "016x")
