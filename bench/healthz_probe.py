"""An open-loop healthz prober for `bench.fairness`, and the figures drawn from its samples.

`python -m bench.healthz_probe PORT OUTFILE [--interval-ms 10] [--timeout 5]` sends
`GET /_sseproxy/healthz` every interval whether or not earlier probes have been answered (each
on a kept-alive connection of its own while others are outstanding), and appends one line per
probe to OUTFILE: its start (CLOCK_MONOTONIC, comparable across processes), its latency in
seconds, and 1 if it was answered 200 in time. Open loop on purpose: a prober that waits for
each answer sends one probe during a 2 s stall and sees one slow sample among hundreds, which
a p99 hides; sent on a clock, every probe the stall delays counts (no coordinated omission).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REQUEST = b"GET /_sseproxy/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@dataclass(frozen=True)
class Sample:
    start: float  # time.monotonic() when the probe was sent
    latency: float  # seconds until answered, or until it failed (then a lower bound)
    ok: bool


@dataclass(frozen=True)
class Latency:
    """healthz latency over a window, in milliseconds."""

    p50: float
    p99: float
    max: float
    probes: int
    failed: int


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (the smallest value with at least q % of values at or below
    it): always a measured value, never an interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(samples: Iterable[Sample]) -> Latency:
    chosen = list(samples)
    ms = [s.latency * 1000 for s in chosen]
    return Latency(
        p50=percentile(ms, 50),
        p99=percentile(ms, 99),
        max=max(ms, default=math.nan),
        probes=len(chosen),
        failed=sum(not s.ok for s in chosen),
    )


def window(samples: Iterable[Sample], start: float, end: float) -> list[Sample]:
    """The probes sent within [start, end], however long they took to answer."""
    return [s for s in samples if start <= s.start <= end]


def read_samples(path: Path) -> list[Sample]:
    samples = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) == 3:  # a line being written when the prober was stopped is skipped
            samples.append(Sample(float(fields[0]), float(fields[1]), fields[2] == "1"))
    return samples


async def probe(port: int, out: Path, interval: float, timeout: float) -> None:
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    pending: set[asyncio.Task[None]] = set()
    with out.open("a", buffering=1) as log:

        async def one() -> None:
            start = time.monotonic()
            conn = idle.pop() if idle else None
            ok = False
            try:
                async with asyncio.timeout(timeout):
                    if conn is None:
                        conn = await asyncio.open_connection("127.0.0.1", port)
                    reader, writer = conn
                    writer.write(REQUEST)
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":", 1)[1])
                    await reader.readexactly(length)
                ok = head.startswith(b"HTTP/1.1 200")
                idle.append(conn)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
                if conn is not None:
                    conn[1].close()
            log.write(f"{start:.6f} {time.monotonic() - start:.6f} {int(ok)}\n")

        due = time.monotonic()
        while True:
            task = asyncio.create_task(one())
            pending.add(task)
            task.add_done_callback(pending.discard)
            due += interval
            await asyncio.sleep(max(0.0, due - time.monotonic()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("port", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(probe(args.port, args.out, args.interval_ms / 1000, args.timeout))
