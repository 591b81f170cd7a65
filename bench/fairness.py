"""Fairness and slow-reader benchmark: can one hostile peer hold the proxy's event loop or its
memory? (issue 28)

`python -m bench.fairness [--rounds 2] [--scenarios ws-fragments,...] [--event-loop asyncio]
[--quick] [--pin] [--json FILE] [--proxy-arg=--some-flag=value]`

Per round and scenario, a fresh `sseproxy` (the installed command, on its defaults: uvloop when
installed) runs as a subprocess in front of a hostile upstream (`bench.hostile_upstream`, a
process of its own started once per run); an open-loop prober process (`bench.healthz_probe`)
sends `GET /_sseproxy/healthz` every 10 ms on its own connections. The proxy first idles for
`--idle` seconds (the idle window), then the scenario runs (its window: until its clients are
done, plus 1 s for work the proxy does after the last byte). The proxy's peak RSS is its VmHWM
at the window's end, its "after" RSS the VmRSS `--after` seconds after the scenario's clients
closed. With `--pin`, the proxy and the prober run on CPU 0 and the hostile peers (the upstream,
and the clients in this process) on the others: on a 2-core machine the peers otherwise take
the proxy's and the prober's CPU, and healthz waits for the scheduler as well as for the
proxy's loop. The table shows medians over rounds; `p99 / idle p99` is against the p99 of every idle
window of the run together. Each scenario stops by itself (bounded in count, `--timeout` s at
most); a scenario the proxy refuses, or a proxy that exits, is a FAILED row and exit status 1.

Scenarios (sizes as issue 28 measured them; `--quick` divides them for a smoke run):
  ws-fragments       the upstream sends one text message as 100,000 one-byte frames
  ws-pings           the upstream sends 100,000 pings (the client answers each)
  ws-deflate-bomb    permessage-deflate: messages of 127, 127, then 129 MiB from ~130 KB each
                     (max_ws_message_bytes is 128 MiB)
  ws-deflate-memory  10 sessions each sent one 100 MiB message as ~100 KB of deflate, held open
  ws-slow-clients    200 WebSocket clients stop reading while the upstream sends each 16 MiB
                     in messages of 1 MiB
  http-gzip-bomb     one SSE answer, `Content-Encoding: gzip`, 10 MB inflating to 10 GiB of blank
                     lines; the client reads it all
  http-slow-readers  300 clients read 64 KiB of a 10 MiB stream each, then stop reading
  ledger-ids         80 streams (8 at a time) of 256 events whose SSE ids are 64 KiB each
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import aiohttp

from bench.healthz_probe import Latency, Sample, read_samples, summarize, window
from bench.hostile_upstream import FRAGMENT_HEAD, FRAGMENT_TAIL, MIB, gzip_bomb

SETTLE_S = 1.0  # the window goes on this long after the clients are done
PROBE_TIMEOUT_S = 5.0  # a probe not answered by then counts as failed, at this latency
TARGET_RATIO = 5.0  # issue 28: healthz p99 within 5x its idle p99
WS_PATH = "/v1/realtime"
HTTP_PATH = "/v1/chat/completions"
LEDGER_PATH = "/events"
CHAT_BODY = {"model": "bench", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@dataclass(frozen=True)
class Sizes:
    fragments: int = 100_000
    pings: int = 100_000
    bomb_mib: tuple[int, ...] = (127, 127, 129)
    memory_sessions: int = 10
    memory_mib: int = 100
    ws_clients: int = 200
    ws_flood_mib: int = 16
    ws_message_kib: int = 1024
    gzip_mib: int = 10 * 1024
    http_clients: int = 300
    stream_mib: int = 10
    ledger_streams: int = 80
    ledger_events: int = 256
    ledger_id_kib: int = 64
    hold_s: float = 8.0  # how long stalled clients and open sessions are held


QUICK = Sizes(10_000, 10_000, (8, 8), 2, 8, 20, 2, 256, 64, 30, 2, 8, 32, 64, 2.0)


class ScenarioFailed(Exception):
    """The scenario could not be carried out as designed (refused, proxy gone, timed out)."""


@dataclass
class Ctx:
    port: int
    sizes: Sizes

    def ws_url(self, name: str, **query: object) -> str:
        extra = "".join(f"&{k}={v}" for k, v in query.items())
        return f"ws://127.0.0.1:{self.port}{WS_PATH}?bench={name}{extra}"

    def http_url(self, name: str, **query: object) -> str:
        extra = "".join(f"&{k}={v}" for k, v in query.items())
        return f"http://127.0.0.1:{self.port}{HTTP_PATH}?bench={name}{extra}"


# --- clients ------------------------------------------------------------------------------------


@dataclass
class Received:
    messages: int = 0
    bytes: int = 0
    pings: int = 0
    close_code: int | None = None


async def receive_all(ws: aiohttp.ClientWebSocketResponse) -> Received:
    """Reads a session to its end, answering each ping as a client would."""
    got = Received()
    while True:
        msg = await ws.receive()
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            got.messages += 1
            got.bytes += len(msg.data)
        elif msg.type == aiohttp.WSMsgType.PING:
            got.pings += 1
            with contextlib.suppress(ConnectionError):  # the close may be on its way already
                await ws.pong(msg.data)
        elif msg.type != aiohttp.WSMsgType.PONG:
            break
    got.close_code = ws.close_code
    return got


async def ws_session(url: str, deflate: bool) -> Received:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            url, compress=15 if deflate else 0, max_msg_size=0, autoping=False
        ) as ws,
    ):
        return await receive_all(ws)


async def ws_fragments(ctx: Ctx) -> str:
    # A session the proxy ends (a close code of its own) is an outcome, not a failure: the row
    # says so. Only a refusal, a dead proxy or a timeout fails a scenario.
    n = ctx.sizes.fragments
    got = await ws_session(ctx.ws_url("ws-fragments", n=n), deflate=False)
    expected = len(FRAGMENT_HEAD) + len(FRAGMENT_TAIL) + n - 2
    whole = got.messages == 1 and got.bytes == expected
    relayed = "relayed whole" if whole else f"NOT relayed ({got.messages} messages, {got.bytes} B)"
    return f"1 message of {n:,} frames {relayed}, close {got.close_code}"


async def ws_pings(ctx: Ctx) -> str:
    n = ctx.sizes.pings
    got = await ws_session(ctx.ws_url("ws-pings", n=n), deflate=False)
    last = "" if got.messages == 1 else ", the message after them NOT relayed"
    return f"{got.pings:,} of {n:,} pings relayed (and answered){last}, close {got.close_code}"


async def ws_deflate_bomb(ctx: Ctx) -> str:
    sizes = ",".join(map(str, ctx.sizes.bomb_mib))
    got = await ws_session(ctx.ws_url("ws-deflate-bomb", sizes=sizes), deflate=True)
    if got.close_code == 1008:
        raise ScenarioFailed("permessage-deflate was not negotiated upstream")
    return (
        f"{got.messages} of {len(ctx.sizes.bomb_mib)} messages relayed "
        f"({got.bytes / MIB:,.0f} MiB), close {got.close_code}"
    )


async def ws_deflate_memory(ctx: Ctx) -> str:
    s = ctx.sizes
    url = ctx.ws_url("ws-deflate-memory", mib=s.memory_mib)
    async with aiohttp.ClientSession() as session:
        sockets = [
            await session.ws_connect(url, compress=15, max_msg_size=0, autoping=False)
            for _ in range(s.memory_sessions)
        ]
        try:
            messages = await asyncio.gather(*(ws.receive() for ws in sockets))
            whole = sum(
                m.type == aiohttp.WSMsgType.TEXT and len(m.data) == s.memory_mib * MIB
                for m in messages
            )
            await asyncio.sleep(s.hold_s)  # the sessions stay open: what does the proxy keep?
        finally:
            await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    codes = sorted({str(ws.close_code) for ws in sockets if ws.close_code is not None})
    ended = f", closes {'/'.join(codes)}" if codes else ""
    return (
        f"{s.memory_sessions} sessions held {s.hold_s} s, {whole} got their {s.memory_mib} MiB "
        f"message whole{ended}"
    )


def ws_upgrade(port: int, target: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def http_post(port: int, target: str) -> bytes:
    body = json.dumps(CHAT_BODY).encode()
    head = (
        f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def stalled(port: int, request: bytes, first: int, status: bytes) -> socket.socket:
    """Sends `request`, reads `first` bytes of the answer (which must start with `status`),
    then never reads again; a 16 KiB receive buffer keeps what the kernel holds small."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, request)
        got = b""
        while len(got) < first:
            data = await loop.sock_recv(sock, first - len(got))
            if not data:
                break
            got += data
        if not got.startswith(status):
            raise ScenarioFailed(f"answered {got[:40]!r}, not {status!r}")
    except BaseException:
        sock.close()
        raise
    return sock


async def hold_then_close(sockets: list[socket.socket], hold: float) -> None:
    try:
        await asyncio.sleep(hold)
    finally:
        for sock in sockets:
            sock.close()


async def ws_slow_clients(ctx: Ctx) -> str:
    s = ctx.sizes
    target = f"{WS_PATH}?bench=ws-flood&mib={s.ws_flood_mib}&kib={s.ws_message_kib}"
    request = ws_upgrade(ctx.port, target)
    # Only the 101's head is read: "HTTP/1.1 101" is 12 bytes.
    results = await asyncio.gather(
        *(stalled(ctx.port, request, 12, b"HTTP/1.1 101") for _ in range(s.ws_clients)),
        return_exceptions=True,
    )
    sockets = [r for r in results if isinstance(r, socket.socket)]
    errors = [r for r in results if not isinstance(r, socket.socket)]
    if errors:
        for sock in sockets:
            sock.close()
        raise ScenarioFailed(f"{len(errors)} of {s.ws_clients} sessions refused: {errors[0]!r}")
    await hold_then_close(sockets, s.hold_s)
    return f"{s.ws_clients} sessions, no reads for {s.hold_s} s, then closed"


async def http_gzip_bomb(ctx: Ctx) -> str:
    mib = ctx.sizes.gzip_mib
    expected = len(gzip_bomb(mib))
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(ctx.http_url("gzip-bomb", mib=mib), json=CHAT_BODY) as resp,
    ):
        body = await resp.read()
    if resp.status != 200 or len(body) != expected:
        raise ScenarioFailed(f"status {resp.status}, {len(body):,} of {expected:,} bytes")
    return f"{len(body) / 1e6:.1f} MB of gzip ({mib:,} MiB inflated) read whole"


async def http_slow_readers(ctx: Ctx) -> str:
    s = ctx.sizes
    request = http_post(ctx.port, f"{HTTP_PATH}?bench=stream&mib={s.stream_mib}")
    results = await asyncio.gather(
        *(stalled(ctx.port, request, 64 * 1024, b"HTTP/1.1 200") for _ in range(s.http_clients)),
        return_exceptions=True,
    )
    sockets = [r for r in results if isinstance(r, socket.socket)]
    errors = [r for r in results if not isinstance(r, socket.socket)]
    if errors:
        for sock in sockets:
            sock.close()
        raise ScenarioFailed(f"{len(errors)} of {s.http_clients} refused: {errors[0]!r}")
    await hold_then_close(sockets, s.hold_s)
    return f"{s.http_clients} clients, no reads for {s.hold_s} s, then closed"


async def ledger_ids(ctx: Ctx) -> str:
    s = ctx.sizes
    gate = asyncio.Semaphore(8)
    total = 0

    async def one(session: aiohttp.ClientSession, stream: int) -> None:
        nonlocal total
        query = f"bench=ledger&s={stream}&events={s.ledger_events}&id_kib={s.ledger_id_kib}"
        # A plain SSE stream (no LLM dialect): resumable with Last-Event-ID, so its ids are
        # what the resume ledger records once it ends.
        url = f"http://127.0.0.1:{ctx.port}{LEDGER_PATH}?{query}"
        async with gate, session.get(url) as resp:
            if resp.status != 200:
                raise ScenarioFailed(f"stream {stream}: status {resp.status}")
            async for chunk in resp.content.iter_any():
                total += len(chunk)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(one(session, i) for i in range(s.ledger_streams)))
    return (
        f"{s.ledger_streams} streams x {s.ledger_events} events with "
        f"{s.ledger_id_kib} KiB ids read ({total / 1e6:,.0f} MB)"
    )


SCENARIOS: dict[str, Callable[[Ctx], Awaitable[str]]] = {
    "ws-fragments": ws_fragments,
    "ws-pings": ws_pings,
    "ws-deflate-bomb": ws_deflate_bomb,
    "ws-deflate-memory": ws_deflate_memory,
    "ws-slow-clients": ws_slow_clients,
    "http-gzip-bomb": http_gzip_bomb,
    "http-slow-readers": http_slow_readers,
    "ledger-ids": ledger_ids,
}


# --- processes ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ScenarioFailed(f"{what} exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise ScenarioFailed(f"{what} did not listen on {port} within {timeout} s")


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM in MB (MiB), from /proc."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values


def stop(proc: subprocess.Popen[bytes], grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace` (a proxy whose loop is held never gets to exit)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


PROXY_CPUS = {0}


def peer_cpus() -> set[int]:
    others = os.sched_getaffinity(0) - PROXY_CPUS
    if not others:
        raise SystemExit("--pin needs two CPUs or more")
    return others


def pinned(args: argparse.Namespace, cpus: set[int]) -> Callable[[], None] | None:
    """Run in the child before exec (`--pin`): it and every thread it starts use only `cpus`."""
    if not args.pin:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def sseproxy_command(explicit: str | None) -> str:
    """The installed console script: beside this interpreter (a venv), else on PATH."""
    if explicit:
        return explicit
    beside = Path(sys.executable).with_name("sseproxy")
    found = str(beside) if beside.exists() else shutil.which("sseproxy")
    if not found:
        raise SystemExit("no sseproxy command: pip install -e '.[bench]' first")
    return found


@dataclass
class Figures:
    """One scenario in one round."""

    scenario: str
    outcome: str = ""
    error: str | None = None
    idle: list[Sample] = field(default_factory=list)
    latency: Latency | None = None
    rss_idle_mb: float = math.nan
    rss_peak_mb: float = math.nan
    rss_after_mb: float = math.nan
    seconds: float = math.nan


async def guarded(coro: Awaitable[str], proxy: subprocess.Popen[bytes], timeout: float) -> str:
    """The scenario's outcome; ScenarioFailed if the proxy exits or it runs over `timeout`."""
    task = asyncio.ensure_future(coro)
    deadline = time.monotonic() + timeout
    try:
        while not task.done():
            if proxy.poll() is not None:
                raise ScenarioFailed(f"sseproxy exited with {proxy.returncode}")
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"not done within {timeout:.0f} s")
            await asyncio.wait({task}, timeout=0.2)
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def run_one(name: str, args: argparse.Namespace, upstream: int, work: Path) -> Figures:
    figures = Figures(name)
    port = free_port()
    tag = f"{name}-{time.monotonic_ns()}"
    command = [
        sseproxy_command(args.sseproxy), "--listen", f"127.0.0.1:{port}",
        "--upstream", f"http://127.0.0.1:{upstream}",
        *(["--event-loop", args.event_loop] if args.event_loop else []), *args.proxy_arg,
    ]  # fmt: skip
    with (work / f"{tag}.records").open("wb") as out, (work / f"{tag}.stderr").open("wb") as err:
        pin = pinned(args, PROXY_CPUS)
        proxy = subprocess.Popen(command, stdout=out, stderr=err, preexec_fn=pin)
    probes = work / f"{tag}.probes"
    prober: subprocess.Popen[bytes] | None = None
    try:
        await asyncio.to_thread(wait_port, port, proxy, "sseproxy")
        prober = subprocess.Popen(
            [sys.executable, "-m", "bench.healthz_probe", str(port), str(probes),
             "--timeout", str(PROBE_TIMEOUT_S)],
            preexec_fn=pinned(args, PROXY_CPUS),
        )  # fmt: skip
        idle_start = time.monotonic() + 0.5  # the prober's first connection is not idle work
        await asyncio.sleep(args.idle + 0.5)
        idle_end = time.monotonic()
        figures.rss_idle_mb = proc_status(proxy.pid)["VmRSS"]
        start = time.monotonic()
        try:
            sizes = QUICK if args.quick else Sizes()
            figures.outcome = await guarded(SCENARIOS[name](Ctx(port, sizes)), proxy, args.timeout)
        except (ScenarioFailed, aiohttp.ClientError, OSError) as e:
            figures.error = (
                f"{type(e).__name__}: {e}" if not isinstance(e, ScenarioFailed) else str(e)
            )
        figures.seconds = time.monotonic() - start
        await asyncio.sleep(SETTLE_S)
        end = time.monotonic()
        if proxy.poll() is None:
            figures.rss_peak_mb = proc_status(proxy.pid)["VmHWM"]
            await asyncio.sleep(args.after)
        if proxy.poll() is None:
            figures.rss_after_mb = proc_status(proxy.pid)["VmRSS"]
        else:
            exited = f"sseproxy exited with {proxy.returncode}"
            figures.error = f"{figures.error}; {exited}" if figures.error else exited
        # Probes sent by the window's end are answered, or fail, by then.
        await asyncio.sleep(max(0.0, end + PROBE_TIMEOUT_S + 0.3 - time.monotonic()))
        prober.terminate()
        prober.wait()
        samples = read_samples(probes)
        figures.idle = window(samples, idle_start, idle_end)
        figures.latency = summarize(window(samples, start, end))
    except ScenarioFailed as e:
        figures.error = str(e)
    finally:
        if prober is not None and prober.poll() is None:
            prober.kill()
            prober.wait()
        await asyncio.to_thread(stop, proxy)
    if figures.error:
        tail = (work / f"{tag}.stderr").read_text(errors="replace").strip().splitlines()[-5:]
        if tail:
            figures.error += "; sseproxy stderr: " + " / ".join(tail)
    return figures


# --- the table ----------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else math.nan


def fmt(value: float, spec: str) -> str:
    return "–" if math.isnan(value) else format(value, spec)


def table(results: dict[str, list[Figures]], idle: Latency) -> list[str]:
    lines = [
        "| scenario | healthz p50 ms | p99 ms | max ms | p99 / idle p99 | peak RSS MB | "
        "peak RSS / idle | after-close RSS / idle | failed probes | what happened |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    idle_rss = median([f.rss_idle_mb for rounds in results.values() for f in rounds])
    lines.append(
        f"| idle | {fmt(idle.p50, '.2f')} | {fmt(idle.p99, '.2f')} | {fmt(idle.max, '.1f')} | "
        f"1.0 | {fmt(idle_rss, '.0f')} | 1.00 | 1.00 | {idle.failed}/{idle.probes} | "
        f"{idle.probes} probes in the idle windows |"
    )
    for name, rounds in results.items():
        lat = [f.latency for f in rounds if f.latency is not None]
        p99 = median([x.p99 for x in lat])
        failed = sorted({f.error for f in rounds if f.error})
        what = "FAILED: " + "; ".join(failed) if failed else rounds[-1].outcome
        what = what.replace("|", "/")  # a table cell
        lines.append(
            f"| {name} | {fmt(median([x.p50 for x in lat]), '.2f')} | {fmt(p99, '.2f')} | "
            f"{fmt(median([x.max for x in lat]), '.0f')} | {fmt(p99 / idle.p99, '.1f')} | "
            f"{fmt(median([f.rss_peak_mb for f in rounds]), '.0f')} | "
            f"{fmt(median([f.rss_peak_mb / f.rss_idle_mb for f in rounds]), '.2f')} | "
            f"{fmt(median([f.rss_after_mb / f.rss_idle_mb for f in rounds]), '.2f')} | "
            f"{sum(x.failed for x in lat)}/{sum(x.probes for x in lat)} | "
            f"{what} ({fmt(median([f.seconds for f in rounds]), '.1f')} s) |"
        )
    return lines


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    names = args.scenarios.split(",")
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    version = subprocess.run(
        [sseproxy_command(args.sseproxy), "--version"], capture_output=True, text=True
    ).stdout.strip()
    print(f"# python -m bench.fairness {shlex.join(sys.argv[1:])}")
    print(
        f"# {platform.node()}: {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}; {version or 'sseproxy'}, event loop "
        f"{args.event_loop or 'default'}; medians of {args.rounds} rounds; "
        f"{'proxy and prober on CPU 0, peers on the others; ' if args.pin else ''}"
        f"load average at start {load_average()}",
        flush=True,
    )
    if args.pin:
        os.sched_setaffinity(0, peer_cpus())  # this process's clients, and the upstream
    work = Path(tempfile.mkdtemp(prefix="sseproxy-fairness-"))
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.hostile_upstream", str(up_port)])
    results: dict[str, list[Figures]] = {n: [] for n in names}
    try:
        await asyncio.to_thread(wait_port, up_port, upstream, "the hostile upstream")
        for round_ in range(args.rounds):
            for name in names:
                if upstream.poll() is not None:
                    raise SystemExit(f"the hostile upstream exited with {upstream.returncode}")
                figures = await run_one(name, args, up_port, work)
                results[name].append(figures)
                lat = figures.latency
                print(
                    f"# round {round_ + 1} {name}: {figures.error or figures.outcome}; healthz "
                    f"p99 {fmt(lat.p99 if lat else math.nan, '.1f')} ms, max "
                    f"{fmt(lat.max if lat else math.nan, '.0f')} ms; RSS idle "
                    f"{figures.rss_idle_mb:.0f}, peak {figures.rss_peak_mb:.0f}, after "
                    f"{figures.rss_after_mb:.0f} MB; load {load_average()}",
                    flush=True,
                )
    finally:
        stop(upstream, grace=2)
    idle = summarize([s for rounds in results.values() for f in rounds for s in f.idle])
    print()
    print("\n".join(table(results, idle)))
    verdicts = []
    for name, rounds in results.items():
        p99 = median([f.latency.p99 for f in rounds if f.latency is not None])
        ratio = p99 / idle.p99
        met = ratio <= TARGET_RATIO and not any(f.error for f in rounds)
        verdicts.append(f"{name} {fmt(ratio, '.1f')}x {'met' if met else 'MISSED'}")
    print(f"\ntarget healthz p99 <= {TARGET_RATIO:.0f}x idle p99: " + "; ".join(verdicts))
    print(f"total {time.monotonic() - began:.0f} s; load average at end {load_average()}")
    if args.json:
        dump = {
            n: [{**asdict(replace(f, idle=[])), "idle": asdict(summarize(f.idle))} for f in rounds]
            for n, rounds in results.items()
        }
        Path(args.json).write_text(json.dumps(dump, indent=1, default=str))
    if any(f.error for rounds in results.values() for f in rounds):
        print(f"FAILED scenarios: the proxies' records and stderr are kept in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--event-loop", choices=["asyncio", "uvloop"], help="passed to sseproxy")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--idle", type=float, default=3.0, help="idle window, seconds")
    parser.add_argument("--after", type=float, default=3.0, help="after-close wait, seconds")
    parser.add_argument("--timeout", type=float, default=90.0, help="per scenario, seconds")
    parser.add_argument("--sseproxy", help="the sseproxy command (default: the installed one)")
    parser.add_argument("--proxy-arg", action="append", default=[], help="passed to sseproxy")
    parser.add_argument(
        "--pin", action="store_true", help="proxy and prober on CPU 0, the peers on the others"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every round's figures here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
