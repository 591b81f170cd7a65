"""What a quarantine before reuse costs the upstream pool.

`python -m bench.pool_quarantine [--requests N]`. One client sends N requests one after the
other (an agent loop) to a loopback keep-alive upstream, over plain TCP and over TLS (a
trustme CA), with 0 or 10 ms between a response's end and the next request, for each
quarantine. Reported: connections opened and the mean time per request. A connection in
quarantine cannot serve the next request, so each request that comes sooner opens (and, over
TLS, handshakes) a connection of its own: on a real network that is one round trip or three.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import tempfile
import time
from pathlib import Path

import trustme
from yarl import URL

from sseproxy.shell.upstream import UpstreamEnd, UpstreamPool

BODY = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


class _Receiver:
    def __init__(self) -> None:
        self.done = asyncio.get_running_loop().create_future()

    def on_body(self, chunk: bytes) -> None:
        pass

    def on_end(self, end: UpstreamEnd) -> None:
        self.done.set_result(end)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line[15:])
                    for line in head.split(b"\r\n")
                    if line.startswith(b"Content-Length:")
                ),
                0,
            )
            await reader.readexactly(length)
            writer.write(ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass  # the client left, or the run is over
    finally:
        writer.close()


async def _run(
    url: URL, ca_file: str | None, quarantine_s: float, gap_s: float, requests: int
) -> tuple[int, float]:
    pool = UpstreamPool(connect_timeout=5, ca_file=ca_file, quarantine_s=quarantine_s)
    start = time.perf_counter()
    try:
        for _ in range(requests):
            receiver = _Receiver()
            await pool.request("POST", url, [], b"{}", receiver, head_timeout=5)
            await receiver.done
            if gap_s:
                await asyncio.sleep(gap_s)
    finally:
        await pool.close()
    elapsed = time.perf_counter() - start - gap_s * requests
    return pool.stats.opened, elapsed / requests * 1000


async def main(requests: int) -> None:
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_tls)
    plain = await asyncio.start_server(_serve, "127.0.0.1", 0)
    tls = await asyncio.start_server(_serve, "127.0.0.1", 0, ssl=server_tls)
    with tempfile.TemporaryDirectory() as tmp:
        ca_file = str(Path(tmp) / "ca.pem")
        ca.cert_pem.write_to_path(ca_file)
        targets = [
            ("tcp", URL(f"http://127.0.0.1:{plain.sockets[0].getsockname()[1]}/v1"), None),
            ("tls", URL(f"https://localhost:{tls.sockets[0].getsockname()[1]}/v1"), ca_file),
        ]
        print(f"{requests} sequential requests per row")
        print(f"{'leg':>4} {'gap ms':>7} {'quarantine ms':>14} {'opened':>7} {'ms/request':>11}")
        for name, url, ca_path in targets:
            for gap_s in (0.0, 0.010):
                for quarantine_s in (0.0, 0.002, 0.005):
                    opened, per = await _run(url, ca_path, quarantine_s, gap_s, requests)
                    print(
                        f"{name:>4} {gap_s * 1000:7.0f} {quarantine_s * 1000:14.0f}"
                        f" {opened:7d} {per:11.3f}"
                    )
    plain.close()
    tls.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    asyncio.run(main(parser.parse_args().requests))
