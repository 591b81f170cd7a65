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
