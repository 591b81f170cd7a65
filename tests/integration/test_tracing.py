"""OpenTelemetry spans: GenAI attributes from the verdict, traceparent continued and forwarded,
and OTLP/HTTP export to a real (local) receiver."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from sseproxy.config import load
from sseproxy.proxy import create_app
from tests.integration.fake_upstream import Close, Script, Send
from tests.streams import chat_chunk, sse

trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from sseproxy.tracing import Tracing  # noqa: E402

PATH = "/v1/chat/completions"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def chat(content=None, finish=None):
    return chat_chunk(content, finish, response_id="chatcmpl-9", model="gpt-x-2026")


USAGE = {
    "id": "chatcmpl-9",
    "choices": [],
    "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
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
        PATH, json={"model": "gpt-x", "stream": True}, headers={"traceparent": PARENT}
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
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 2)
    assert (a["sseproxy.state"], a["sseproxy.last_event"]) == ("completed", "[DONE]")
    assert [e.name for e in span.events] == ["sseproxy.first_byte", "sseproxy.first_content"]
    # continued from the incoming traceparent...
    assert format(span.context.trace_id, "032x") == PARENT.split("-")[1]
    assert format(span.parent.span_id, "016x") == PARENT.split("-")[2]
    # ...and the upstream request is a child of the proxy's span
    forwarded = fake.seen[0].headers["traceparent"].split("-")
    assert forwarded[1] == PARENT.split("-")[1] and forwarded[2] == format(
        span.context.span_id, "016x"
    )


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
    upstream, aiohttp_server, aiohttp_client, logs
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
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
