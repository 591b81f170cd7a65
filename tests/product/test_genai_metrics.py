"""The GenAI conventions' time to first chunk, through the installed `sseproxy` command on its
defaults: the record's `first_chunk_ms` (any event) is at most its `ttft_ms` (first content),
and `/_sseproxy/metrics` exports the conventions' two streaming histograms under their OTel
names."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.product.proxy_process import ProxyProcess

pytestmark = pytest.mark.product


async def test_first_chunk_in_the_record_and_the_genai_histograms(proxy: ProxyProcess) -> None:
    name = f"ok-{uuid.uuid4().hex[:10]}"
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
    try:
        async with asyncio.timeout(30):
            stream = await client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    finally:
        await client.close()
    assert text
    [record] = await proxy.wait_records(lambda r: r.get("model") == name)
    assert 0 <= record["first_chunk_ms"] <= record["ttft_ms"]
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        http.get(proxy.url + "/_sseproxy/metrics") as response,
    ):
        exposition = await response.text()
    families = {f.name: f for f in text_string_to_metric_families(exposition)}
    first = families["gen_ai_client_operation_time_to_first_chunk_seconds"]
    counts = [
        s.value
        for s in first.samples
        if s.name.endswith("_count") and s.labels["route"] == "openai"
    ]
    assert counts and sum(counts) >= 1
    assert families["gen_ai_client_operation_time_per_output_chunk_seconds"].type == "histogram"


@pytest.mark.parametrize("encoding", ["gzip", "br"])
async def test_a_compressed_request_body_is_forwarded_as_sent_and_read_for_the_record(
    proxy: ProxyProcess, encoding: str
) -> None:
    """A client that compresses its request body: the provider (here the fake, an aiohttp
    server that inflates request bodies) gets the bytes the client sent, and the record still
    names the model asked for (decoded from a bounded copy)."""
    import gzip
    import json

    brotli = pytest.importorskip("brotli")
    name = f"ok-{uuid.uuid4().hex[:10]}"
    body = json.dumps({"model": name, "stream": True, "messages": []}).encode()
    sent = gzip.compress(body) if encoding == "gzip" else brotli.compress(body)
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        http.post(proxy.url + "/v1/chat/completions", data=sent, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        await response.read()
    [record] = await proxy.wait_records(lambda r: r.get("model") == name)
    assert (record["state"], record["stream"]) == ("completed", True)
