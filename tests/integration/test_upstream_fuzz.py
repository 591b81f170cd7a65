"""A bounded fuzzer of the upstream side: generated HTTP/1.1 responses, split, cut and
mutated, played byte for byte. Whatever arrives, every request gets exactly one record and the
client's response ends (no hang). A fixed seed in the suite; more cases with
SSEPROXY_FUZZ_CASES=N (and another seed with SSEPROXY_FUZZ_SEED)."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import random

import aiohttp

from tests.integration.fake_upstream import Close, Reset, Send
from tests.integration.raw_upstream import WireStep, WireUpstream

CASES = int(os.environ.get("SSEPROXY_FUZZ_CASES", "300"))
SEED = int(os.environ.get("SSEPROXY_FUZZ_SEED", "11"))
PATHS = [
    "/v1/chat/completions",
    "/v1/messages",
    "/v1beta/models/g:streamGenerateContent?alt=sse",
    "/v1/responses",
    "/api/chat",
    "/other",
]
STATUSES = [200] * 8 + [201, 204, 304, 400, 429, 500, 503, 99, 101, 103, 600]
CONTENT_TYPES = [
    "text/event-stream",
    "text/event-stream; charset=utf-8",
    "application/json",
    "application/x-ndjson",
    "text/plain",
]
ODD_HEADERS = [
    b"X-Request-Id: req_1",
    b"X-Foo: caf\xe9",
    b"X-Ctl: a\x01b",
    b"Transfer-Encoding: gzip, chunked",
    b"Connection: keep-alive",
    b"Content-Encoding: br",
    b"Content-Type: text/\xffevent",
]
STRINGS = ["Hello", "w\u00f6rld \u2713", "\\ud800", "\\udfff\\ud800", "\\u0000", "\u4e16\u754c", ""]
NUMBERS = [0, 1, -1, 2**64, 10**30, 1.5, -(2**70)]


def event(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    text = rng.choice(STRINGS)
    if kind == 0:
        obj = f'{{"id":"c","model":"{text}","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}'
    elif kind == 1:
        finish = rng.choice(["stop", "length", "null"])
        usage = (
            f'{{"prompt_tokens":{rng.choice(NUMBERS)},"completion_tokens":{rng.choice(NUMBERS)}}}'
        )
        obj = f'{{"id":"c","choices":[{{"index":0,"delta":{{}},"finish_reason":"{finish}"}}],"usage":{usage}}}'
    elif kind == 2:
        obj = f'{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{text}"}}}}'
    elif kind == 3:
        obj = f'{{"candidates":[{{"content":{{"parts":[{{"text":"{text}"}}]}},"finishReason":"STOP"}}]}}'
    elif kind == 4:
        obj = (
            f'{{"error":{{"message":"{text}","type":"server_error","code":{rng.choice(NUMBERS)}}}}}'
        )
    else:
        obj = "[DONE]"
    if rng.random() < 0.1:
        return obj.encode() + b"\n"  # NDJSON-style
    return b"data: " + obj.encode("utf-8", "surrogatepass") + b"\n\n"


def mutate(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    choice = rng.randrange(5)
    if choice == 0:
        return data[:i] + data[i + rng.randrange(1, 20) :]  # delete a slice
    if choice == 1:
        return data[:i] + rng.randbytes(rng.randrange(1, 8)) + data[i:]  # splice in noise
    if choice == 2:
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    if choice == 3:
        return data[:i]  # cut
    j = rng.randrange(i, len(data))
    return data[:j] + data[i:j] + data[j:]  # repeat a slice


def generate(rng: random.Random) -> list[WireStep]:
    status = rng.choice(STATUSES)
    body = b"".join(event(rng) for _ in range(rng.randrange(0, 6)))
    headers = [b"Content-Type: " + rng.choice(CONTENT_TYPES).encode()]
    if rng.random() < 0.15:
        body = gzip.compress(body)
        headers.append(b"Content-Encoding: gzip")
    if rng.random() < 0.2:
        headers.append(rng.choice(ODD_HEADERS))
    framing = rng.choice(["chunked", "length", "short", "long", "close"])
    if framing == "chunked":
        headers.append(b"Transfer-Encoding: chunked")
        pieces = [body[i : i + 40] for i in range(0, len(body), 40)]
        payload = b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"
    elif framing == "close":
        headers.append(b"Connection: close")
        payload = body
    else:
        declared = len(body) + {"length": 0, "short": -3, "long": 7}[framing]
        headers.append(b"Content-Length: %d" % max(declared, 0))
        payload = body
    version = b"HTTP/1.0" if framing == "close" and rng.random() < 0.5 else b"HTTP/1.1"
    wire = version + b" %03d X\r\n" % status + b"\r\n".join(headers) + b"\r\n\r\n" + payload
    for _ in range(rng.choice([0, 0, 1, 2])):
        wire = mutate(rng, wire)
    cuts = sorted(rng.sample(range(1, len(wire)), min(rng.randrange(4), max(len(wire) - 1, 0))))
    bounds = zip([0, *cuts], [*cuts, len(wire)], strict=True)
    steps: list[WireStep] = [Send(wire[a:b]) for a, b in bounds]
    steps.append(Reset() if rng.random() < 0.1 else Close())
    return steps


async def test_every_generated_upstream_response_gives_one_record_and_an_ending(
    proxy_server, logs
) -> None:
    wire = WireUpstream()
    await wire.start()
    try:
        url = await proxy_server(wire.url, idle_timeout=10)
        rng = random.Random(SEED)
        ids: list[str | None] = []
        async with aiohttp.ClientSession() as session:
            for case in range(CASES):
                wire.steps = generate(rng)
                method = "HEAD" if rng.random() < 0.05 else "POST"
                request_id = None
                try:
                    async with (
                        asyncio.timeout(20),  # a hang fails the case instead of stalling
                        session.request(
                            method, url + rng.choice(PATHS), json={}, auto_decompress=False
                        ) as resp,
                    ):
                        request_id = resp.headers.get("x-sseproxy-request-id")
                        async for _ in resp.content.iter_any():
                            pass
                except aiohttp.ClientError:
                    pass  # a broken upstream body is a broken client body: that is the point
                ids.append(request_id)
                records = await logs.wait(case + 1)
                assert len(records) == case + 1, (case, wire.steps)
        records = logs.records()
        assert len(records) == CASES  # exactly one record per request
        for request_id, record in zip(ids, records, strict=True):
            assert request_id in (None, record["request_id"])
            json.dumps(record)
    finally:
        await wire.stop()
