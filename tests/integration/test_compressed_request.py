"""A request body sent with `Content-Encoding: zstd`, `gzip` or `br` (some agents compress
theirs): the proxy forwards the bytes as sent, and decodes a copy, bounded, for the record's
request-aware fields (`model`; `stream`, which the stream checks read)."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse

brotli = pytest.importorskip("brotli")
zstandard = pytest.importorskip("zstandard")

PATH = "/v1/chat/completions"
BODY = json.dumps({"model": "gpt-5-mini", "stream": True, "messages": []}).encode()
CODECS = {
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
    "gzip": gzip.compress,
    "br": brotli.compress,
}


@pytest.mark.parametrize("encoding", sorted(CODECS))
async def test_a_compressed_body_names_its_model_and_stream(
    encoding: str, upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(sse(chat_chunk("Hi"), chat_chunk(finish="stop"), "[DONE]"))]))
    client = await make_proxy()
    sent = CODECS[encoding](BODY)
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    response = await client.post(PATH, data=sent, headers=headers)
    assert response.status == 200
    await response.read()
    [record] = await logs.wait()
    assert (record["model"], record["state"]) == ("gpt-5-mini", "completed")
    # the upstream got the client's bytes, still compressed, with their Content-Encoding
    [seen] = fake.seen
    assert seen.body == sent and seen.headers["Content-Encoding"] == encoding


async def test_a_body_that_decodes_beyond_the_bound_names_nothing(
    upstream, make_proxy, logs
) -> None:
    from sseproxy.core.request_body import MAX_DECODED_BYTES

    fake, _ = upstream
    fake.script(PATH, Script([Send(sse(chat_chunk("Hi"), chat_chunk(finish="stop"), "[DONE]"))]))
    client = await make_proxy()
    padded = BODY[:-1] + b"," + b'"pad": "' + b"x" * MAX_DECODED_BYTES + b'"}'
    sent = gzip.compress(padded)
    response = await client.post(PATH, data=sent, headers={"Content-Encoding": "gzip"})
    await response.read()
    [record] = await logs.wait()
    assert record["model"] is None  # unknown, as for any body beyond the parse bound
    assert fake.seen[0].body == sent


async def test_the_span_reads_a_compressed_bodys_parameters(
    upstream, aiohttp_server, aiohttp_client, logs
) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sseproxy.config import load
    from sseproxy.observe.tracing import Tracing
    from sseproxy.shell.app import create_app
    from tests.integration.conftest import SERVER_KWARGS
    from tests.integration.test_tracing import spans_of

    fake, url = upstream
    fake.script(PATH, Script([Send(sse(chat_chunk("Hi"), chat_chunk(finish="stop"), "[DONE]"))]))
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    app = create_app(load(None, {}, {"upstream": url}), tracing=tracing)
    client = await aiohttp_client(await aiohttp_server(app, **SERVER_KWARGS))
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 77}).encode()
    sent = CODECS["zstd"](body)
    response = await client.post(PATH, data=sent, headers={"Content-Encoding": "zstd"})
    await response.read()
    [span] = await spans_of(exporter, tracing, 1)
    assert span.attributes["gen_ai.request.max_tokens"] == 77
    assert span.attributes["gen_ai.request.model"] == "m"
