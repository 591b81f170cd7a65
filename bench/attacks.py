"""Figures for the shell's bounds against one bad client, on loopback.

`python -m bench.attacks [--connections 2000] [--request-timeout 5]`

Starts sseproxy (a subprocess, so its RSS is its own) in front of a small upstream, then
opens N connections that each send the headers and 1 byte of a 100-byte body and go silent
(the "body hold"), and 16 clients each sending a 32 MiB body. While they hold, it measures a
normal request's status, healthz latency (max of probes every 50 ms) and the proxy's RSS.
Then a gzip bomb: the upstream answers a stream with a ~100 KB gzip body that expands to
100 MB of SSE events; the same figures are measured while the proxy forwards and analyses it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import zlib
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.proxy import free_port, wait_port

PATH = "/v1/chat/completions"
ANSWER = (
    b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def rss_mb(pid: int) -> tuple[float, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values["VmRSS"], values["VmHWM"]


def gzip_bomb(size: int = 100 * 1024 * 1024) -> bytes:
    """`size` bytes of tiny SSE events, gzip-compressed (~1000:1)."""
    event = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = event * (1024 * 1024 // len(event))
    parts = [compressor.compress(block) for _ in range(size // len(block))]
    return b"".join([*parts, compressor.flush()])


async def upstream_app() -> web.Application:
    bomb = gzip_bomb()

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        if request.path.endswith("/bomb"):
            headers = {"Content-Encoding": "gzip", "Content-Type": "text/event-stream"}
            return web.Response(body=bomb, headers=headers)
        return web.Response(body=ANSWER, content_type="text/event-stream")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def probe_healthz(url: str, stop: asyncio.Event) -> float:
    worst = 0.0
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            t0 = time.monotonic()
            async with session.get(url + "/_sseproxy/healthz") as resp:
                await resp.read()
            worst = max(worst, time.monotonic() - t0)
            await asyncio.sleep(0.05)
    return worst


async def body_hold(port: int, n: int) -> list[asyncio.StreamWriter]:
    writers = []
    head = f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode()
    for _ in range(n):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head)
        writers.append(writer)
    return writers


async def big_bodies(url: str, clients: int, size: int) -> list[int]:
    async def one(session: aiohttp.ClientSession) -> int:
        async with session.post(url + PATH, data=b" " * size) as resp:
            await resp.read()
            return resp.status

    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(one(session) for _ in range(clients))))


async def bomb_figures(url: str, pid: int) -> dict[str, object]:
    """One client reads the whole bomb through the proxy while healthz is probed."""
    stop = asyncio.Event()
    health = asyncio.create_task(probe_healthz(url, stop))
    rss_before = rss_mb(pid)[0]
    t0 = time.monotonic()
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(url + PATH + "/bomb", json={}) as resp,
    ):
        received = len(await resp.read())
    seconds = time.monotonic() - t0
    stop.set()
    return {
        "compressed_bytes": received,
        "seconds": round(seconds, 2),
        "healthz_max_ms": round(await health * 1000, 1),
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_mb(pid)[0],
    }


async def main(args: argparse.Namespace) -> None:
    runner = web.AppRunner(await upstream_app())
    await runner.setup()
    up_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", up_port).start()
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "sseproxy", "--listen", f"127.0.0.1:{port}",
            "--upstream", f"http://127.0.0.1:{up_port}", "--log-format", "json",
            "--max-request-body-bytes", str(40 * 1024 * 1024),
            *(["--request-timeout", str(args.request_timeout)] if args.request_timeout else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_port, port)
        figures: dict[str, object] = {"rss_idle_mb": rss_mb(proc.pid)[0]}
        stop = asyncio.Event()
        health = asyncio.create_task(probe_healthz(url, stop))
        writers = await body_hold(port, args.connections)
        await asyncio.sleep(1)
        async with aiohttp.ClientSession() as session, session.post(url + PATH, json={}) as r:
            figures["normal_request_during_body_hold"] = r.status
        figures["rss_during_body_hold_mb"] = rss_mb(proc.pid)[0]
        statuses = await big_bodies(url, 16, 32 * 1024 * 1024)
        figures["sixteen_32MiB_bodies"] = {s: statuses.count(s) for s in set(statuses)}
        figures["rss_peak_mb"] = rss_mb(proc.pid)[1]
        stop.set()
        figures["healthz_max_ms"] = round(await health * 1000, 1)
        for w in writers:
            w.close()
        figures["gzip_bomb"] = await bomb_figures(url, proc.pid)
        print(json.dumps(figures))
    finally:
        proc.terminate()
        try:
            proc.wait(30)  # held connections keep it for up to --shutdown-grace
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--request-timeout", type=float, default=None)
    asyncio.run(main(parser.parse_args()))
