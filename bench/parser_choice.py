"""Which HTTP/1.1 response parser the upstream leg stands on: httptools (llhttp) or h11.

`python -m bench.parser_choice [--rounds N]`. Each candidate parses one chunked SSE response
(a Chat Completions stream of 2,000 events, each in its own HTTP chunk) fed in reads of
100-500 bytes, the sizes a streaming upstream's reads have, and hands every body piece to a
callback, as the upstream protocol does. Reported: the best round's ns per read (and per
event), the head included once per response; then the same for the leg's own layers on the
chosen parser (`ResponseParser`, and the whole data callback of `UpstreamConnection`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Callable

import h11
import httptools

from sseproxy.shell.upstream.connection import PoolStats, UpstreamConnection
from sseproxy.shell.upstream.parser import ResponseParser

EVENTS = 2000


def sse_response(events: int = EVENTS) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"x-request-id: req_0123456789abcdef\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    parts = [head]
    for i in range(events):
        event = (
            b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
            b'"model":"bench","choices":[{"index":0,"delta":{"content":"\xe6\xb5\x81 %d"},'
            b'"logprobs":null,"finish_reason":null}]}\n\n' % i
        )
        parts.append(b"%x\r\n%s\r\n" % (len(event), event))
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


def reads(wire: bytes, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    out, at = [], 0
    while at < len(wire):
        size = rng.randint(100, 500)
        out.append(wire[at : at + size])
        at += size
    return out


class _Sink:
    """The callbacks httptools calls; the body goes to a list, as it would go to a relay."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        pass

    def on_headers_complete(self) -> None:
        pass

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


def run_httptools(chunks: list[bytes]) -> int:
    sink = _Sink()
    parser = httptools.HttpResponseParser(sink)
    feed = parser.feed_data
    for chunk in chunks:
        feed(chunk)
    assert sink.done
    return sum(map(len, sink.body))


def run_h11(chunks: list[bytes]) -> int:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    body: list[bytes] = []
    done = False
    for chunk in chunks:
        conn.receive_data(chunk)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                break
            if type(event) is h11.Data:
                body.append(event.data)
            elif type(event) is h11.EndOfMessage:
                done = True
                break
    assert done
    return sum(map(len, body))


def run_ours(chunks: list[bytes]) -> int:
    """The chosen parser as the leg feeds it (bounds, CRLF CRLF candidates, the sink)."""
    parser = ResponseParser()
    body: list[bytes] = []
    parser.sink = body.append
    rest = b""
    for chunk in chunks:
        if rest:
            rest = parser.feed(rest)
        rest = parser.feed(chunk)
    assert parser.complete
    return sum(map(len, body))


class _Transport(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass


class _Receiver:
    def __init__(self) -> None:
        self.body: list[bytes] = []

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_end(self, end: object) -> None:
        pass


def run_connection(chunks: list[bytes]) -> int:
    """The whole data callback: connection -> exchange -> parser -> receiver."""
    loop = asyncio.new_event_loop()
    try:
        conn = UpstreamConnection(loop, PoolStats())
        conn.connection_made(_Transport())
        receiver = _Receiver()
        exchange = conn.start(b"", receiver, no_body=False)
        conn.data_received(chunks[0])
        loop.run_until_complete(exchange.head)
        loop.run_until_complete(asyncio.sleep(0))  # the held bytes go after the head
        received = conn.data_received
        for chunk in chunks[1:]:
            received(chunk)
        assert exchange.ended is not None and exchange.ended.complete
        return sum(map(len, receiver.body))
    finally:
        loop.close()


CANDIDATES: dict[str, Callable[[list[bytes]], int]] = {
    f"httptools {httptools.__version__}": run_httptools,
    f"h11 {h11.__version__}": run_h11,
    "ResponseParser": run_ours,
    "UpstreamConnection": run_connection,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    wire = sse_response()
    chunks = reads(wire)
    expected = {run(chunks) for run in CANDIDATES.values()}
    assert len(expected) == 1, expected  # both parsers see the same body
    print(f"{len(wire)} bytes, {len(chunks)} reads of 100-500 bytes, {EVENTS} events")
    for name, run in CANDIDATES.items():
        best = min(_timed(run, chunks) for _ in range(args.rounds))
        print(f"{name:>19}: {best / len(chunks):8.0f} ns/read  {best / EVENTS:8.0f} ns/event")


def _timed(run: Callable[[list[bytes]], int], chunks: list[bytes]) -> int:
    start = time.perf_counter_ns()
    run(chunks)
    return time.perf_counter_ns() - start


if __name__ == "__main__":
    main()
