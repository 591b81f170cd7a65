"""Clients that stop reading: the proxy's memory and responsiveness, on loopback.

`python -m bench.slow_readers [--clients 300] [--mb 10] [--hold 10] [--proxy-arg=...]`

Starts sseproxy (a subprocess, so its RSS is its own) in front of an upstream (another
subprocess) that streams `--mb` MB of SSE events to each request as fast as it is read.
`--clients` clients each send a request, read the first 64 KiB of their stream, then read
nothing for `--hold` seconds, then close. Meanwhile healthz is probed every 100 ms. Prints
one JSON line: the proxy's RSS idle, at its highest while the clients hold, and 3 s after
they closed; healthz latency (max and p99); and whether every probe answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time

import aiohttp
from aiohttp import web

from bench.attacks import rss_mb
from bench.proxy import free_port, wait_port

PATH = "/v1/chat/completions"
BLOCK = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"  # one 64 KiB event
FIRST_READ = 64 * 1024


async def upstream_app(mb: int) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(mb * 1024 * 1024 // len(BLOCK)):
            await response.write(BLOCK)  # waits whenever the proxy stops reading
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def stalled_client(port: int) -> socket.socket:
    """Sends a request, reads the first bytes of the answer, then never reads again."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    body = b'{"stream": true}'
    head = f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    await loop.sock_sendall(sock, head.encode() + body)
    got = 0
    while got < FIRST_READ:
        data = await loop.sock_recv(sock, FIRST_READ - got)
        if not data:
            break
        got += len(data)
    return sock


async def probe_healthz(url: str, stop: asyncio.Event, latencies: list[float]) -> int:
    """Probes every 100 ms until `stop`; returns how many probes failed (timeout 10 s)."""
    failed = 0
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                async with session.get(url + "/_sseproxy/healthz") as resp:
                    await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                failed += 1
            latencies.append(time.monotonic() - t0)
            await asyncio.sleep(0.1)
    return failed


def serve_upstream(port: int, mb: int) -> None:
    """The upstream, in a process of its own: its work does not slow the probes."""
    web.run_app(upstream_app(mb), host="127.0.0.1", port=port, print=None, access_log=None)


async def main(args: argparse.Namespace) -> None:
    up_port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.slow_readers", "--serve-upstream", str(up_port),
         "--mb", str(args.mb)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "sseproxy", "--listen", f"127.0.0.1:{port}",
            "--upstream", f"http://127.0.0.1:{up_port}", "--log-format", "json",
            "--max-concurrent-streams", str(max(2000, args.clients + 10)),
            *args.proxy_arg,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_port, up_port)
        await asyncio.to_thread(wait_port, port)
        figures: dict[str, object] = {"clients": args.clients, "mb_per_stream": args.mb}
        figures["rss_idle_mb"] = round(rss_mb(proc.pid)[0], 1)
        stop = asyncio.Event()
        latencies: list[float] = []
        health = asyncio.create_task(probe_healthz(url, stop, latencies))
        socks = await asyncio.gather(*(stalled_client(port) for _ in range(args.clients)))
        deadline = time.monotonic() + args.hold
        peak = 0.0
        while time.monotonic() < deadline:
            peak = max(peak, rss_mb(proc.pid)[0])
            await asyncio.sleep(0.2)
        figures["rss_during_mb"] = round(peak, 1)
        for sock in socks:
            sock.close()
        await asyncio.sleep(3)
        figures["rss_after_mb"] = round(rss_mb(proc.pid)[0], 1)
        stop.set()
        figures["healthz_failed"] = await health
        figures["healthz_max_ms"] = round(max(latencies) * 1000, 1)
        figures["healthz_p99_ms"] = round(
            statistics.quantiles(latencies, n=100, method="inclusive")[98] * 1000
            if len(latencies) > 1
            else 0,
            1,
        )
        figures["healthz_probes"] = len(latencies)
        print(json.dumps(figures))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        upstream.kill()
        upstream.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--hold", type=float, default=10.0)
    parser.add_argument("--proxy-arg", action="append", default=[], help="passed to sseproxy")
    parser.add_argument("--serve-upstream", type=int, default=0, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.serve_upstream:
        serve_upstream(arguments.serve_upstream, arguments.mb)
    else:
        asyncio.run(main(arguments))
