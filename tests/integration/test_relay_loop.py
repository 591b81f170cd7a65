"""The one relay loop: chunks are written from the upstream's callback while the client keeps
up (the accelerator's direct writes), through the relay's task when it pushes back or a drill
or a compressed body needs waiting, and every path keeps the bytes whole and in order, the
record true, and a bug of ours visible as a break instead of a hang. Most tests run twice:
accelerated, and with every write through aiohttp's documented `response.write()`."""

from __future__ import annotations

import asyncio
import gzip

import aiohttp
import pytest

from sseproxy.config import load
from sseproxy.shell import accelerator, state
from sseproxy.shell.app import create_app
from sseproxy.shell.delivery import ClientDelivery
from tests.integration.conftest import captured, raw_exchange
from tests.integration.fake_upstream import Script, Send, Sleep
from tests.integration.raw_upstream import Body, Pause, RawScript, RawUpstream
from tests.integration.test_transport_truth import CASES, HEADERS, PATHS, TRUNCATIONS, fetch
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


def numbered(n: int) -> list[bytes]:
    """n distinct Chat events, then the end: any reordering or loss shows in the bytes."""
    events = [sse(chat_chunk(f" {i}")) for i in range(n)]
    return [*events, sse(chat_chunk(finish="stop")), b"data: [DONE]\n\n"]


def paced(pieces: list[bytes]) -> list[Send | Sleep]:
    """Each piece sent on its own, 2 ms apart: one upstream chunk each."""
    return [step for piece in pieces for step in (Send(piece), Sleep(0.002))]


@pytest.fixture
def direct(monkeypatch) -> list[int]:
    """The sizes of the chunks written directly (the accelerator), in order."""
    seen: list[int] = []
    write_now = ClientDelivery.write_now

    def spy(self: ClientDelivery, chunk: bytes) -> bool:
        seen.append(len(chunk))
        return write_now(self, chunk)

    monkeypatch.setattr(ClientDelivery, "write_now", spy)
    return seen


def assert_direct(mode: str, direct: list[int], body: bytes, first: bytes) -> None:
    """Accelerated: the task wrote the first chunk (aiohttp sends the head with it), direct
    writes most of the rest (exact counts would depend on how the kernel groups sends into
    reads on a loaded machine). Documented: no direct write at all."""
    if mode == "accelerated":
        assert len(body) // 2 <= sum(direct) <= len(body) - len(first)
    else:
        assert direct == []


async def test_a_paced_stream_is_relayed_whole_and_in_order(
    relay_mode, upstream, make_proxy, logs, direct
) -> None:
    fake, _ = upstream
    events = numbered(40)
    fake.script(PATH, Script(paced(events)))
    client = await make_proxy()
    resp = await client.post(PATH, json={"stream": True})
    assert await resp.read() == b"".join(events)
    [record] = await logs.wait(1)
    assert record["state"] == "completed" and record["events"] == len(events)
    assert record["client_bytes"] == len(b"".join(events))
    assert accelerator.enabled() is (relay_mode == "accelerated")
    assert_direct(relay_mode, direct, b"".join(events), events[0])


async def test_a_client_that_stops_reading_moves_the_stream_to_the_task_and_back(
    upstream, make_proxy, logs, direct
) -> None:
    fake, _ = upstream
    block = b"data: " + b"z" * 65_530 + b"\n\n"
    blocks = [block.replace(b"zzzz", b"%04d" % i, 1) for i in range(300)]  # 20 MB, numbered
    tail = [Sleep(0.05), *(Send(e) for e in numbered(20))]
    fake.script(PATH, Script([*(Send(b) for b in blocks), *tail]))
    client = await make_proxy()
    resp = await client.post(PATH, json={"stream": True})
    got = await resp.content.readexactly(1024)
    await asyncio.sleep(0.3)  # the client's socket fills up: the upstream must wait for it
    got += await resp.read()
    assert got == b"".join(blocks) + b"".join(numbered(20))
    [record] = await logs.wait(1)
    assert record["state"] == "completed" and record["client_wait_ms"] >= 200
    # Back-pressure handed the stream to the task, which waited; the events after the pause
    # were small and the client kept up again, so they were written directly.
    assert sum(direct) >= len(b"".join(numbered(20)))


async def test_75000_tiny_chunks_in_few_reads_stay_in_order(
    relay_mode, wire, proxy_server, logs
) -> None:
    first = sse(chat_chunk("first"))
    body = b"".join(numbered(3)) * 2000  # 6,000+ events, about 0.5 MB
    tiny = b"".join(
        b"%x\r\n%b\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7)
    )
    wire.steps = [
        Send(HEAD + b"%x\r\n%b\r\n" % (len(first), first)),
        Sleep(0.05),  # the task writes `first`; direct writes wait for what follows
        Send(tiny + b"0\r\n\r\n"),  # ~75,000 chunks of 7 bytes in as few reads as TCP makes
    ]
    url = await proxy_server(wire.url)
    async with aiohttp.ClientSession() as session, session.post(url + PATH, json={}) as resp:
        assert await resp.read() == first + body
    [record] = await logs.wait(1)
    assert record["client_bytes"] == len(first + body) and record["state"] == "completed"


async def test_a_drill_transforms_every_chunk_and_a_compressed_body_is_analysed_whole(
    relay_mode, upstream, make_proxy, logs
) -> None:
    """Neither may skip the task's work: a drill's cut applies to chunks that would otherwise
    be written directly, and the compressed body's events are all counted."""
    fake, _ = upstream
    events = numbered(10)
    fake.script(PATH, Script(paced(events)))
    client = await make_proxy(allow_inject=True)
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "cut-after=5"})
    got = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async for piece in resp.content.iter_any():
            got += piece
    assert got == b"".join(events[:5])
    packed = gzip.compress(b"".join(events))
    parts = [packed[i : i + 50] for i in range(0, len(packed), 50)]
    fake.script(PATH, Script(paced(parts), headers={"Content-Encoding": "gzip"}))
    resp = await client.post(PATH, json={}, auto_decompress=False)
    assert await resp.read() == packed
    records_ = await logs.wait(2)
    assert [r["state"] for r in records_] == ["interrupted", "completed"]
    assert records_[1]["events"] == len(events)  # the compressed body was analysed whole


async def test_a_bug_of_ours_in_the_loop_breaks_the_client_and_keeps_the_record(
    relay_mode, upstream, make_proxy, logs, monkeypatch
) -> None:
    fake, _ = upstream
    events = numbered(20)
    fake.script(PATH, Script(paced(events)))
    calls = 0
    chunk = state.Timings.chunk

    def flaky(
        self: state.Timings, arrived: float, now: float, deltas: int, events: int = 0
    ) -> None:
        nonlocal calls
        calls += 1
        if calls == 5:  # the fifth chunk: written directly by then, when accelerated
            raise RuntimeError("a bug in the bookkeeping")
        chunk(self, arrived, now, deltas, events)

    monkeypatch.setattr(state.Timings, "chunk", flaky)
    client = await make_proxy()
    resp = await client.post(PATH, json={})
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(resp.read(), 10)  # a break, never a hang or a clean end
    [record] = await logs.wait(1)
    assert record["state"] == "http_error" and record["error"]["type"] == "sseproxy_internal_error"
    assert "a bug in the bookkeeping" in record["error"]["message"]


async def test_an_http10_client_gets_the_body_unframed_and_whole(
    relay_mode, upstream, proxy_server, logs, direct
) -> None:
    """HTTP/1.0 has no chunked encoding: the bytes go as they came and the end is the close,
    as aiohttp's own writer does."""
    fake, url = upstream
    events = numbered(30)
    fake.script(PATH, Script(paced(events)))
    proxy = await proxy_server(url)
    port = int(proxy.rsplit(":", 1)[1])
    request = b"POST " + PATH.encode() + b" HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}"
    raw = await raw_exchange(port, request)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    assert body == b"".join(events)
    [record] = await logs.wait(1)
    assert record["state"] == "completed" and record["client_bytes"] == len(body)
    assert_direct(relay_mode, direct, body, events[0])


@pytest.mark.parametrize("cut", [TRUNCATIONS[0], TRUNCATIONS[2]], ids=lambda t: t.name)
@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c.dialect))
async def test_a_body_cut_mid_stream_is_interrupted_and_the_client_sees_the_break(
    relay_mode, case, cut, aiohttp_client, logs, direct
) -> None:
    """The transport-truth cuts, made while chunks are being relayed: the body arrives in HTTP
    chunks of at most 40 bytes, 5 ms apart, then the upstream hangs up or resets."""
    raw = RawUpstream()
    await raw.start()
    try:
        body = case.decided
        size = min(40, max(1, len(body) // 4))  # four pieces at least
        pieces = [body[i : i + size] for i in range(0, len(body), size)]
        steps = [step for p in pieces for step in (Body(p), Pause(0.005))]
        headers = dict(HEADERS.get(case, {"Content-Type": "text/event-stream"}))
        raw.script = RawScript([*steps, cut.end()], framing="chunked", headers=headers)
        client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
        got, broke = await fetch(client, PATHS[case])
    finally:
        await raw.stop()
    assert (got, broke) == (body, True)
    [record] = await logs.wait(1)
    assert (record["state"], record["http_complete"]) == ("interrupted", False)
    assert record["interruption"]["reason"] == cut.reason
    assert_direct(relay_mode, direct, body, pieces[0])


async def test_a_capture_holds_every_chunk_with_its_time(
    relay_mode, upstream, make_proxy, logs, direct, tmp_path
) -> None:
    fake, _ = upstream
    events = numbered(25)
    fake.script(PATH, Script(paced(events)))
    client = await make_proxy(capture_dir=str(tmp_path))
    resp = await client.post(PATH, json={"stream": True})
    assert await resp.read() == b"".join(events)
    [record] = await logs.wait(1)
    _, sidecar, body = await captured(client, tmp_path)
    assert body == b"".join(events) and sidecar["http_complete"] is True
    assert_direct(relay_mode, direct, body, events[0])
    assert record["state"] == "completed"
    # An index entry per upstream chunk (a loaded machine may join two sends in one read), in
    # order, each stamped when it arrived.
    chunks = sidecar["chunks"]
    assert b"".join(body[offset : offset + size] for offset, size, _ in chunks) == body
    assert [offset for offset, _, _ in chunks] == sorted({o for o, _, _ in chunks})
    assert len(chunks) >= len(events) // 2
    times = [at for _, _, at in chunks]
    assert times == sorted(times) and times[-1] - times[0] >= 24 * 2  # 2 ms apart, or more


class _Closing:
    """A transport that says it is closing, and is otherwise the one it wraps."""

    def __init__(self, transport: object) -> None:
        self._transport = transport

    def is_closing(self) -> bool:
        return True

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


async def test_a_client_gone_before_a_direct_write_stops_the_upstream_at_once(
    upstream, make_proxy, logs, monkeypatch
) -> None:
    """The client's connection is closing between two chunks written from the upstream's
    callback, and aiohttp has not told the handler yet (it never does here: only the
    transport says so): that chunk is not written, the upstream is aborted there and then,
    and the record says the client left after 4 events, never `completed`."""
    fake, _ = upstream
    events = numbered(40)
    fake.script(PATH, Script(paced(events)))
    writes = 0
    write_now = ClientDelivery.write_now

    def closing(self: ClientDelivery, chunk: bytes) -> bool:
        nonlocal writes
        writes += 1
        if writes == 4:  # the fifth chunk (the task wrote the first): the client has gone
            # (a stand-in: uvloop's transports take no new attributes)
            monkeypatch.setattr(self, "_transport", _Closing(self._transport))
        return write_now(self, chunk)

    monkeypatch.setattr(ClientDelivery, "write_now", closing)
    client = await make_proxy()
    resp = await client.post(PATH, json={"stream": True})
    [record] = await logs.wait(1)
    resp.close()
    assert record["interruption"]["reason"] == "client_disconnected"
    assert record["client_bytes"] == sum(len(e) for e in events[:4])
    assert record["events_delivered"] == 4
    await asyncio.wait_for(fake.disconnected[PATH].wait(), 5)  # generation stopped


async def test_when_the_probe_disagrees_the_proxy_relays_through_aiohttp_alone(
    upstream, make_proxy, logs, direct, monkeypatch
) -> None:
    async def other_framing(version: str) -> tuple[bool, bytes]:
        return version == "1.1", b"unexpected"

    monkeypatch.setattr(accelerator.Detection, "enabled", None)
    monkeypatch.setattr(accelerator, "probe", other_framing)
    fake, _ = upstream
    events = numbered(20)
    fake.script(PATH, Script(paced(events)))
    client = await make_proxy()
    resp = await client.post(PATH, json={"stream": True})
    assert await resp.read() == b"".join(events)
    [record] = await logs.wait(1)
    assert record["state"] == "completed" and not accelerator.enabled()
    assert direct == []  # every write was `await response.write()`
