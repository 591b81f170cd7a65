"""Where the proxy's CPU goes: sseproxy in this process under cProfile, an upstream and a load
generator as subprocesses. `python -m bench.profile_proxy [--streams 500 --events 100
--interval-ms 50]` prints the top functions by own time. Per request, as agents send them:
`--streams 2000 --events 1 --interval-ms 0 --spread 4 --dialect responses --body-kb 40`.

Instruction counts, which a shared machine does not disturb: `valgrind --tool=callgrind
--instr-atstart=no python -m bench.profile_proxy --no-profile --callgrind ...`, then
`callgrind_annotate` on its output (the total over the load, divided by the requests)."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import pstats
import subprocess
import sys
import time
from typing import Any

from aiohttp import web

from bench.proxy import free_port, wait_port
from sseproxy import server
from sseproxy.config import load
from sseproxy.observe import log
from sseproxy.shell.app import create_app


async def serve_and_load(args: argparse.Namespace, upstream: str) -> tuple[int, float]:
    """(events relayed, proxy CPU seconds while the load ran: start-up and shutdown excluded,
    as bench.proxy measures)."""
    log.configure("json", "info", io.StringIO(), cache=False)
    if args.naive:
        from bench import naive_proxy

        app = web.Application()
        app["upstream"] = upstream
        app.router.add_route("*", "/{tail:.*}", naive_proxy.handle)
        app.cleanup_ctx.append(naive_proxy.session_ctx)
    else:
        app = create_app(load(None, {}, {"upstream": upstream}))
    runner = web.AppRunner(app, access_log=None, handler_cancellation=not args.naive)
    await runner.setup()
    port = 0
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    port = runner.addresses[0][1]
    cpu = time.process_time()
    if args.callgrind:  # count instructions from here (run under valgrind --instr-atstart=no)
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True)
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
        str(args.spread),
        "--dialect",
        args.dialect,
        "--body-kb",
        str(args.body_kb),
        stdout=subprocess.PIPE,
    )
    out, _ = await load_proc.communicate()
    cpu = time.process_time() - cpu
    if args.callgrind:
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True)
    print(out.decode())
    await runner.cleanup()
    events: int = json.loads(out)["events"]
    return events, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=50)
    parser.add_argument("--per-write", type=int, default=1)
    parser.add_argument("--spread", type=float, default=1.0, help="seconds to start them over")
    parser.add_argument("--dialect", default="chat", choices=("chat", "anthropic", "responses"))
    parser.add_argument("--body-kb", type=int, default=0, help="agent-shaped bodies of ~K KB")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true", help="only the CPU per event")
    parser.add_argument("--naive", action="store_true", help="the naive pass-through instead")
    parser.add_argument(
        "--without",
        choices=("tap", "timings", "log", "sinks", "ledger", "metrics"),
        action="append",
        default=[],
        help="stub a part out, to see what it costs",
    )
    parser.add_argument("--gc-threshold", type=int, help="gc.set_threshold(N) first")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instrument only while the load runs: run under "
        "`valgrind --tool=callgrind --instr-atstart=no` (with --no-profile)",
    )
    parser.add_argument("--save", metavar="FILE", help="also write the profile (pstats) here")
    parser.add_argument(
        "--timer", choices=("cpu", "wall"), default="cpu", help="what the profile measures"
    )
    args = parser.parse_args()
    stub(args.without)
    if not args.naive:
        server.tune_gc()  # as the sseproxy command does at startup
    if args.gc_threshold:
        gc.set_threshold(args.gc_threshold)
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.upstream", str(up_port)])
    try:
        wait_port(up_port)
        # CPU time, not wall time: on a shared machine, time spent preempted would otherwise
        # be charged to whichever function was running (a socket write, a log line).
        timer = time.process_time if args.timer == "cpu" else time.perf_counter
        profiler = cProfile.Profile(timer)
        if not args.no_profile:
            profiler.enable()
        coro = serve_and_load(args, f"http://127.0.0.1:{up_port}")
        if args.uvloop:
            import uvloop

            events, cpu = uvloop.run(coro)
        else:
            events, cpu = asyncio.run(coro)
        profiler.disable()
    finally:
        upstream.terminate()
        upstream.wait(30)
    print(
        f"proxy CPU under load: {cpu:.2f} s, {cpu / max(events, 1) * 1e6:.1f} µs per event, "
        f"{cpu / max(args.streams, 1) * 1e6:.0f} µs per request"
    )
    if not args.no_profile:
        stats = pstats.Stats(profiler)
        if args.save:
            stats.dump_stats(args.save)
        stats.sort_stats("tottime").print_stats(args.top)
        per_request(stats)


def per_request(stats: pstats.Stats) -> None:
    """The end of each request (verdict, record, JSON log, metrics, sinks), per call.

    Under cProfile, whose own cost per call inflates it: an upper bound.
    """
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    table = stats.stats  # type: ignore[attr-defined]
    for (path, _, name), (_, calls, _, cumulative, _) in table.items():
        if path.endswith("shell/app.py") and name == "finish" and calls:
            print(
                f"per request: {name}() {cumulative / calls * 1e6:.1f} µs cumulative, {calls} calls"
            )


def stub(parts: list[str]) -> None:
    """Replace parts of the per-chunk path by no-ops (for measurement only)."""
    from sseproxy.core import tap
    from sseproxy.observe.metrics import Metrics
    from sseproxy.shell import app, state
    from sseproxy.shell.ledger import Links

    if "tap" in parts:
        tap.StreamTap.feed = lambda self, chunk: 0  # type: ignore[method-assign]
    if "timings" in parts:
        state.Timings.chunk = lambda self, arrived, now, content_deltas: None  # type: ignore[method-assign]
    if "log" in parts:  # the whole end of a request: verdict, record, ledger, sinks
        app.finish = lambda *args, **kwargs: None
    if "sinks" in parts:  # the record is built; no sink gets it
        app.deliver = lambda *args, **kwargs: None
    if "ledger" in parts:
        app.link = lambda *args, **kwargs: Links()
    if "metrics" in parts:
        Metrics.observe = lambda *args, **kwargs: None  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
