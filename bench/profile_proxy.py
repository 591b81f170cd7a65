"""Where the proxy's CPU goes: sseproxy in this process under cProfile, an upstream and a load
generator as subprocesses. `python -m bench.profile_proxy [--streams 500 --events 100
--interval-ms 50]` prints the top functions by own time."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import subprocess
import sys

from aiohttp import web

from bench.proxy import free_port, wait_port
from sseproxy import log
from sseproxy.config import load
from sseproxy.proxy import create_app


async def serve_and_load(args: argparse.Namespace, upstream: str) -> None:
    log.configure("json", "info", io.StringIO(), cache=False)
    runner = web.AppRunner(create_app(load(None, {}, {"upstream": upstream})), access_log=None)
    await runner.setup()
    port = 0
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    port = runner.addresses[0][1]
    load_proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.loadgen",
        f"http://127.0.0.1:{port}",
        "--streams",
        str(args.streams),
        "--events",
        str(args.events),
        "--interval-ms",
        str(args.interval_ms),
        "--per-write",
        str(args.per_write),
        "--spread",
        "1",
        stdout=subprocess.PIPE,
    )
    out, _ = await load_proc.communicate()
    print(out.decode())
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=50)
    parser.add_argument("--per-write", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.upstream", str(up_port)])
    try:
        wait_port(up_port)
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(serve_and_load(args, f"http://127.0.0.1:{up_port}"))
        profiler.disable()
    finally:
        upstream.terminate()
        upstream.wait(30)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
