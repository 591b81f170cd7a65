"""A stdout reader that stops (a paused log shipper, `| less` left open, a full pipe): the
installed command must go on answering, and account for every record it could not write."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.product.conftest import Launch

pytestmark = pytest.mark.product
REQUESTS = 1000
HEALTHZ_EVERY = 10  # one healthz call beside every tenth request
CONCURRENCY = 16
# No request answered for this long is a proxy that stopped (not a slow one); the whole run is
# bounded too. Neither is a latency assertion: a healthy proxy answers in milliseconds.
STALL = 20.0
OVERALL = 240.0


async def test_a_stopped_stdout_reader_stops_nothing(launch: Launch) -> None:
    proxy = launch(pause_after_start=True)
    name = f"ok-{uuid.uuid4().hex[:10]}"
    request = {"model": name, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    answered = {"stream": 0, "healthz": 0}
    last_answer = time.monotonic()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def call(http: aiohttp.ClientSession, kind: str) -> None:
        nonlocal last_answer
        async with gate:
            if kind == "stream":
                url = proxy.url + "/v1/chat/completions"
                async with http.post(url, json=request) as response:
                    body = await response.read()
                    assert response.status == 200 and body.rstrip().endswith(b"[DONE]"), body
            else:
                async with http.get(proxy.url + "/_sseproxy/healthz") as response:
                    await response.read()
                    assert response.status == 200
        answered[kind] += 1
        last_answer = time.monotonic()

    order = interleave(REQUESTS, REQUESTS // HEALTHZ_EVERY)
    started = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as http:
        tasks = [asyncio.create_task(call(http, kind)) for kind in order]
        pending = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=1)
            now = time.monotonic()
            if now - last_answer > STALL or now - started > OVERALL:
                break
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    failed = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
    proxy.resume_reading()
    assert not failed, failed[:3]
    assert answered == {"stream": REQUESTS, "healthz": REQUESTS // HEALTHZ_EVERY}, (
        f"answered {answered} of {REQUESTS} requests and {REQUESTS // HEALTHZ_EVERY} healthz "
        f"calls, then nothing for {STALL} s while nobody read the proxy's stdout"
    )

    # Read stdout again: every line whole JSON (records() fails on any other), and every
    # request either written or counted as dropped.
    def accounted() -> tuple[int, int]:
        records = proxy.records()
        kept = sum(r.get("event") == "request.finished" and r.get("model") == name for r in records)
        dropped = sum(r["dropped"] for r in records if r.get("event") == "log.records_dropped")
        return kept, dropped

    deadline = time.monotonic() + 30
    while sum(accounted()) < REQUESTS and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    kept, dropped = accounted()
    assert kept + dropped == REQUESTS, f"{kept} records written + {dropped} dropped"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        http.get(proxy.url + "/_sseproxy/metrics") as response,
    ):
        metrics = await response.text()
    counted = [
        s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "sseproxy_records_dropped_total"
    ]
    assert counted and sum(counted) == dropped, (
        f"sseproxy_records_dropped_total {counted}, {dropped} in log.records_dropped lines"
    )


def interleave(requests: int, healthz: int) -> list[str]:
    """`requests` streams with `healthz` calls spread evenly among them."""
    every = requests // healthz
    order: list[str] = []
    for i in range(requests):
        order.append("stream")
        if (i + 1) % every == 0:
            order.append("healthz")
    return order
