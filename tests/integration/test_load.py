"""1,000 concurrent streams through one proxy on loopback: one correct record each."""

from __future__ import annotations

import asyncio
import collections
import json
import resource

import aiohttp
import pytest
from aiohttp import web

from sseproxy.config import load
from sseproxy.shell.app import create_app

STREAMS = 1000
EVENTS = 20


def chunk(i: int, finish: str | None = None) -> bytes:
    delta = {} if finish else {"content": f"t{i} "}
    obj = {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def upstream_handler(request: web.Request) -> web.StreamResponse:
    kind = request.query["kind"]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for i in range(EVENTS):
        await response.write(chunk(i))
        await asyncio.sleep(0.01)
    if kind == "complete":
        await response.write(chunk(0, "stop") + b"data: [DONE]\n\n")
    elif kind == "error":
        await response.write(b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n')
    # "cut": the body just ends, without a terminal signal
    await response.write_eof()
    return response


KINDS = {"complete": "completed", "error": "failed", "cut": "interrupted"}


async def test_thousand_concurrent_streams(aiohttp_server, logs) -> None:
    old_aiohttp = tuple(int(p) for p in aiohttp.__version__.split(".")[:2]) < (3, 14)
    if old_aiohttp:
        # Seen on the floors (aiohttp 3.11 with uvloop 0.19 or 0.21, and once with asyncio's
        # loop on a loaded CI machine; never with aiohttp 3.14, where it runs on both loops):
        # some of the 1,000 connections are reset. Not yet known which side resets.
        pytest.skip("aiohttp before 3.14 resets some of 1,000 concurrent connections")
    app = web.Application()
    app.router.add_post("/v1/chat/completions", upstream_handler)
    up = await aiohttp_server(app)
    proxy = await aiohttp_server(
        create_app(load(None, {}, {"upstream": str(up.make_url("")).rstrip("/")}))
    )
    url = str(proxy.make_url("/v1/chat/completions"))
    plan = [
        ("complete", "error", "cut")[i % 10 % 3] if i % 10 >= 7 else "complete"
        for i in range(STREAMS)
    ]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> str:
            await asyncio.sleep(i * 0.001)  # starts spread over a second, out of phase
            async with session.post(url, params={"kind": plan[i]}, json={"stream": True}) as resp:
                await resp.read()
                return resp.headers["x-sseproxy-request-id"]

        ids = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(STREAMS))), 120)
    for _ in range(100):
        if len(logs.records()) >= STREAMS:
            break
        await asyncio.sleep(0.05)
    records = logs.records()
    assert len(records) == STREAMS  # none lost
    assert len({r["request_id"] for r in records}) == STREAMS  # none duplicated
    by_id = {r["request_id"]: r for r in records}
    states = collections.Counter(by_id[rid]["state"] for rid in ids)
    assert states == collections.Counter(KINDS[k] for k in plan)
    assert all(by_id[rid]["events"] >= EVENTS for rid in ids)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 400  # the whole test process: client, proxy and upstream together
