"""Delivery and stalls over real loopback sockets: the keepalive-stall drill in `sseproxy mock`,
ClientDelivery around a tiny local relay, and ContentWatch cutting a keep-alive-only stall."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import ClientError, ClientPayloadError, ClientResponse, ClientSession, web

from sseproxy.core import EndReason, StreamTap, Verdict
from sseproxy.core.inject import parse_rules
from sseproxy.core.pacing import Pacing, PacingSummary
from sseproxy.shell.delivery import ClientDelivery, ContentWatch
from sseproxy.tools.mock import INJECT_HEADER, MockServer, load_recordings
from tests import corpus
from tests.streams import chat_chunk as chat
from tests.streams import sse

CHAT_PATH = "/v1/chat/completions"
CHAT_EVENTS = [sse(chat("one")), sse(chat(" two")), sse(chat(finish="stop")), b"data: [DONE]\n\n"]
KEEP_ALIVE = b": keep-alive\n\n"
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


async def read_exactly(resp: ClientResponse, size: int) -> bytes:
    """Read until `size` bytes arrived (or the body ended), each read bounded in time."""
    got = b""
    while len(got) < size:
        chunk = await asyncio.wait_for(resp.content.readany(), 10)
        if not chunk:
            break
        got += chunk
    return got


# -- the keepalive-stall drill in `sseproxy mock` ---------------------------------------------


async def test_mock_keepalive_stall_sends_keep_alives_only_after_n_events(
    tmp_path: Path, aiohttp_client
) -> None:
    (tmp_path / "chat.sse").write_bytes(b"".join(CHAT_EVENTS))
    mock = MockServer(load_recordings([tmp_path]), speed=0, allow_inject=True)
    client = await aiohttp_client(mock.app())
    resp = await client.post(CHAT_PATH, headers={INJECT_HEADER: "keepalive-stall=2"})
    want = CHAT_EVENTS[0] + CHAT_EVENTS[1] + KEEP_ALIVE + KEEP_ALIVE  # the second after 1 s
    assert await read_exactly(resp, len(want)) == want
    resp.close()


async def test_mock_keepalive_stall_pings_in_the_anthropic_dialect(
    tmp_path: Path, aiohttp_client
) -> None:
    body = corpus.file("anthropic-messages/text-basic-pings.sse")
    (tmp_path / "anthropic.sse").write_bytes(body)
    mock = MockServer(load_recordings([tmp_path]), speed=0, inject=parse_rules("keepalive-stall=3"))
    client = await aiohttp_client(mock.app())
    resp = await client.post("/v1/messages")
    first_three = b"\n\n".join(body.split(b"\n\n")[:3]) + b"\n\n"
    want = first_three + PING
    assert await read_exactly(resp, len(want)) == want
    resp.close()


# -- a tiny local relay wired the way the real one will be ------------------------------------


@dataclass
class Outcome:
    """What the tiny relay learnt about one stream."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    transport: asyncio.BaseTransport | None = None
    delivery: ClientDelivery | None = None
    watch: ContentWatch | None = None
    verdict: Verdict | None = None
    pacing: PacingSummary | None = None
    end: EndReason | None = None
    max_gap: float = 0.0  # upstream silence, the client's waits taken out


def tiny_relay(
    upstream_url: str,
    outcome: Outcome,
    content_timeout: float | None = None,
    action: str = "log",
) -> web.Application:
    """The relay loop reduced to what these pieces need: write through ClientDelivery, then
    feed the tap, the pacing and the content watch with the clock read once per chunk."""

    async def handle(request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        async with ClientSession() as session, session.get(upstream_url) as upstream:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            outcome.transport = request.transport
            tap = StreamTap()
            pacing = Pacing(start)
            delivery = outcome.delivery = ClientDelivery(request, response, tap)
            watch = None
            if content_timeout is not None:
                watch = outcome.watch = ContentWatch(content_timeout, action, upstream.close)
            end = EndReason.UPSTREAM_CLOSED
            last = start
            try:
                async for chunk in upstream.content.iter_any():
                    try:
                        await delivery.write(chunk)
                    finally:
                        now = time.monotonic()
                        outcome.max_gap = max(outcome.max_gap, now - last - delivery.last_wait)
                        last = now
                        deltas = tap.feed(chunk)
                        pacing.first_byte(now)
                        if deltas:
                            pacing.content(now, deltas)
                        if watch is not None:
                            watch.chunk(now, deltas)
            except (ConnectionError, ClientError):
                end = EndReason.CLIENT_DISCONNECTED if delivery.failed else end
            except asyncio.CancelledError:  # aiohttp cancels the handler of a client that left
                end = EndReason.CLIENT_DISCONNECTED
                raise
            finally:
                if watch is not None:
                    watch.stop()
                    if watch.expired:
                        end = EndReason.CONTENT_TIMEOUT
                outcome.end = end
                verdict = outcome.verdict = tap.close(end)
                usage = verdict.usage.output_tokens if verdict.usage else None
                outcome.pacing = pacing.conclude(
                    time.monotonic(), usage, last_byte=last, content_timeout=content_timeout
                )
                outcome.done.set()
            if end is EndReason.UPSTREAM_CLOSED:
                await response.write_eof()
            elif request.transport is not None:
                request.transport.close()  # the client sees the break
            return response

    app = web.Application()
    app.router.add_get("/", handle)
    return app


async def serve(aiohttp_server, handler) -> str:
    app = web.Application()
    app.router.add_get("/", handler)
    server = await aiohttp_server(app)
    return str(server.make_url("/"))


BIG_EVENT = b"data: " + b"x" * 32_000 + b"\n\n"
BIG_EVENTS = 500  # 16 MB: more than loopback socket buffers hold, so the writes must wait


async def big_upstream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(BIG_EVENTS):
        await response.write(BIG_EVENT)
    await response.write_eof()
    return response


async def writing_paused(outcome: Outcome) -> None:
    """Wait (bounded) until the relay's writes to the client are held by back-pressure."""
    for _ in range(2000):
        transport = outcome.transport
        # the loop pauses the writer when the buffer passes its high-water mark (uvloop's
        # transports have asyncio's API without subclassing asyncio.WriteTransport)
        if (
            transport is not None
            and transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]
        ):
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the relay's writes never waited")


async def test_a_client_that_pauses_reading_grows_client_wait_not_max_gap(
    aiohttp_server, aiohttp_client
) -> None:
    outcome = Outcome()
    url = await serve(aiohttp_server, big_upstream)
    client = await aiohttp_client(tiny_relay(url, outcome))
    resp = await client.get("/")
    first = await resp.content.readany()
    await writing_paused(outcome)
    hold = 0.5
    await asyncio.sleep(hold)  # the slow app: it reads nothing for this long
    body = first + await asyncio.wait_for(resp.read(), 30)
    await asyncio.wait_for(outcome.done.wait(), 10)
    assert body == BIG_EVENT * BIG_EVENTS
    assert outcome.delivery is not None
    fields = outcome.delivery.fields(broken=False)
    assert fields["client_bytes"] == len(body)
    # The writes waited nearly as long as the client was held after the buffer filled (the
    # relay may first finish its analysis turn before it waits: up to 100 ms on a slow CI)...
    assert fields["client_wait_ms"] >= (hold - 0.1) * 1000
    assert outcome.delivery.waits
    # ...while the upstream itself never went quiet for anything like it.
    assert outcome.max_gap < hold
    assert outcome.verdict is not None and outcome.verdict.events == BIG_EVENTS


async def test_a_client_that_leaves_is_told_the_last_event_it_was_sent(
    aiohttp_server, aiohttp_client
) -> None:
    outcome = Outcome()
    url = await serve(aiohttp_server, big_upstream)
    client = await aiohttp_client(tiny_relay(url, outcome))
    resp = await client.get("/")
    read = b""
    while len(read) < 200_000:
        read += await asyncio.wait_for(resp.content.readany(), 10)
    await writing_paused(outcome)
    resp.close()  # the client leaves mid-stream
    await asyncio.wait_for(outcome.done.wait(), 10)
    assert outcome.delivery is not None
    assert outcome.end is EndReason.CLIENT_DISCONNECTED
    events, last = outcome.delivery.last_delivered()
    whole_read = read.count(b"\n\n")
    assert whole_read <= events < BIG_EVENTS
    assert last == "chunk"
    assert len(read) <= outcome.delivery.client_bytes < len(BIG_EVENT) * BIG_EVENTS
    fields = outcome.delivery.fields(broken=True)
    assert fields["events_delivered"] == events
    assert fields["last_event_delivered"] == "chunk"


# -- content stalls --------------------------------------------------------------------------


async def test_a_keep_alive_only_stall_is_cut_at_the_content_timeout(
    tmp_path: Path, aiohttp_server, aiohttp_client
) -> None:
    (tmp_path / "chat.sse").write_bytes(b"".join(CHAT_EVENTS))
    mock = MockServer(load_recordings([tmp_path]), speed=0, inject=parse_rules("keepalive-stall=2"))
    mock_server = await aiohttp_server(mock.app())
    outcome = Outcome()
    relay = tiny_relay(str(mock_server.make_url("/")), outcome, content_timeout=1.5, action="cut")
    client = await aiohttp_client(relay)
    resp = await client.get("/")
    body = b""
    with contextlib.suppress(ClientPayloadError):
        while chunk := await asyncio.wait_for(resp.content.readany(), 10):
            body += chunk
    await asyncio.wait_for(outcome.done.wait(), 10)
    assert body.startswith(CHAT_EVENTS[0] + CHAT_EVENTS[1] + KEEP_ALIVE)
    assert outcome.end is EndReason.CONTENT_TIMEOUT
    assert outcome.verdict is not None
    assert outcome.verdict.state == "interrupted"
    assert outcome.verdict.interruption is not None
    assert outcome.verdict.interruption.reason == "content_timeout"
    assert outcome.watch is not None and outcome.watch.stalls == 1
    assert outcome.pacing is not None and outcome.pacing.anomalies == ("content_stall",)


async def test_a_stall_in_log_mode_is_counted_and_the_stream_completes(
    aiohttp_server, aiohttp_client
) -> None:
    async def stalling(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(CHAT_EVENTS[0])
        for _ in range(8):  # 0.4 s of keep-alives, no content
            await asyncio.sleep(0.05)
            await response.write(KEEP_ALIVE)
        for event in CHAT_EVENTS[1:]:
            await response.write(event)
        await response.write_eof()
        return response

    outcome = Outcome()
    url = await serve(aiohttp_server, stalling)
    client = await aiohttp_client(tiny_relay(url, outcome, content_timeout=0.2))
    resp = await client.get("/")
    body = await asyncio.wait_for(resp.read(), 10)
    await asyncio.wait_for(outcome.done.wait(), 10)
    assert body == CHAT_EVENTS[0] + KEEP_ALIVE * 8 + b"".join(CHAT_EVENTS[1:])
    assert outcome.end is EndReason.UPSTREAM_CLOSED
    assert outcome.verdict is not None and outcome.verdict.state == "completed"
    assert outcome.watch is not None and outcome.watch.stalls == 1
    assert not outcome.watch.expired
    assert outcome.pacing is not None and outcome.pacing.content_stall
