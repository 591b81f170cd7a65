"""End-to-end proxy benchmark: direct vs naive pass-through vs sseproxy, interleaved rounds.

`python -m bench.proxy [--rounds 5] [--scenarios a,b,c,d,e] [--quick]`

Every candidate runs as its own process beside one upstream process and one load-generator
process, all on loopback. Per round and candidate: the load generator's latency figures, and
the proxy's CPU seconds (utime + stime) and peak RSS (VmHWM) read from /proc. Proxies are
started afresh each round so that VmHWM is that round's peak. The table shows medians over
rounds, and added latency is measured against the direct run of the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Scenario:
    name: str
    streams: int
    events: int
    interval_ms: float
    per_write: int = 1
    spread: float = 1.0
    dialect: str = "chat"


SCENARIOS = {
    "a": Scenario("a: 50 x 200 @ 20 ms", 50, 200, 20),
    "b": Scenario("b: 500 x 100 @ 50 ms", 500, 100, 50, spread=2.0),
    "c": Scenario("c: 8 x 20,000 flat out", 8, 20_000, 0, spread=0.1),
    "d": Scenario("d: 1,000 idle-ish (1 ev / 2 s)", 1000, 5, 2000, spread=2.0),
    "e": Scenario("e: bulk 8 x 250,000, 16 / write", 8, 250_000, 0, per_write=16, spread=0.1),
    "anthropic": Scenario(
        "b': 500 x 100 @ 50 ms, Anthropic", 500, 100, 50, spread=2.0, dialect="anthropic"
    ),
    "responses": Scenario(
        "b'': 500 x 100 @ 50 ms, Responses", 500, 100, 50, spread=2.0, dialect="responses"
    ),
}
QUICK = {
    k: Scenario(
        s.name,
        max(2, s.streams // 10),
        max(5, s.events // 10),
        s.interval_ms,
        s.per_write,
        s.spread / 4,
        s.dialect,
    )
    for k, s in SCENARIOS.items()
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_proxy(kind: str, upstream: str, logdir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    if kind == "naive":
        cmd = [sys.executable, "-m", "bench.naive_proxy", str(port), upstream]
        out = subprocess.DEVNULL
    else:
        cmd = [
            sys.executable,
            "-m",
            "sseproxy",
            "--listen",
            f"127.0.0.1:{port}",
            "--upstream",
            upstream,
            "--log-format",
            "json",
            "--max-concurrent-streams",
            "100000",
        ]
        out = open(logdir / "sseproxy.log", "ab")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def run_load(url: str, s: Scenario) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "bench.loadgen",
        url,
        "--streams",
        str(s.streams),
        "--events",
        str(s.events),
        "--interval-ms",
        str(s.interval_ms),
        "--per-write",
        str(s.per_write),
        "--dialect",
        s.dialect,
        "--spread",
        str(s.spread),
    ]
    result: dict[str, float] = json.loads(
        subprocess.run(cmd, capture_output=True, check=True, text=True).stdout
    )
    return result


def measure(kind: str, s: Scenario, upstream: str, logdir: Path) -> dict[str, float]:
    if kind == "direct":
        return run_load(upstream, s)
    proc, port = start_proxy(kind, upstream, logdir)
    try:
        before = cpu_seconds(proc.pid)
        result = run_load(f"http://127.0.0.1:{port}", s)
        result["cpu_s"] = cpu_seconds(proc.pid) - before
        result["peak_rss_mb"] = peak_rss_mb(proc.pid)
        result["cpu_us_per_event"] = result["cpu_s"] / max(result["events"], 1) * 1e6
        result["cpu_s_per_mb"] = result["cpu_s"] / max(result["bytes"] / 1e6, 1e-9)
    finally:
        proc.terminate()
        proc.wait(30)
    return result


def med(rounds: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in rounds if key in r]
    return statistics.median(values) if values else float("nan")


def report(s: Scenario, results: dict[str, list[dict[str, float]]]) -> None:
    direct = results["direct"]
    print(f"\n### {s.name}\n")
    print(
        "| candidate | streams done | events/s | MB/s | TTFB p50 ms | +lat p50 ms | "
        "+lat p99 ms | lat max ms | CPU µs/event | CPU s/MB | peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, rounds in results.items():
        added50 = [r["lat_p50_ms"] - d["lat_p50_ms"] for r, d in zip(rounds, direct, strict=True)]
        added99 = [r["lat_p99_ms"] - d["lat_p99_ms"] for r, d in zip(rounds, direct, strict=True)]
        print(
            f"| {kind} | {med(rounds, 'completed'):.0f}/{s.streams} | "
            f"{med(rounds, 'events_per_s'):,.0f} | {med(rounds, 'mb_per_s'):.1f} | "
            f"{med(rounds, 'ttfb_p50_ms'):.2f} | {statistics.median(added50):+.2f} | "
            f"{statistics.median(added99):+.2f} | {med(rounds, 'lat_max_ms'):.1f} | "
            f"{med(rounds, 'cpu_us_per_event'):.1f} | {med(rounds, 'cpu_s_per_mb'):.3f} | "
            f"{med(rounds, 'peak_rss_mb'):.0f} |"
        )
    naive, ours = results["naive"], results["sseproxy"]

    def ratio(key: str, a: list[dict[str, float]], b: list[dict[str, float]]) -> float:
        return med(a, key) / med(b, key)

    def added(rounds: list[dict[str, float]], key: str) -> float:
        return statistics.median([r[key] - d[key] for r, d in zip(rounds, direct, strict=True)])

    n50, n99 = added(naive, "lat_p50_ms"), added(naive, "lat_p99_ms")
    o50, o99 = added(ours, "lat_p50_ms"), added(ours, "lat_p99_ms")
    ttfb_naive = med(naive, "ttfb_p50_ms") - med(direct, "ttfb_p50_ms")
    ttfb_ours = med(ours, "ttfb_p50_ms") - med(direct, "ttfb_p50_ms")
    print(
        f"\nsseproxy vs naive: added p99 {o99:+.2f} vs {n99:+.2f} ms "
        f"(ratio {o99 / n99 if n99 > 0 else float('nan'):.2f}); added p50 {o50:+.2f} vs "
        f"{n50:+.2f} ms; CPU/event {ratio('cpu_us_per_event', ours, naive):.2f}x; "
        f"events/s {ratio('events_per_s', ours, naive):.2f}x; "
        f"peak RSS {ratio('peak_rss_mb', ours, naive):.2f}x; "
        f"added TTFB {ttfb_ours:+.2f} vs {ttfb_naive:+.2f} ms.  "
        f"sseproxy vs direct: events/s {ratio('events_per_s', ours, direct):.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scenarios", default="a,b,c,d,e")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--json", metavar="FILE", help="also write every round's figures here")
    args = parser.parse_args()
    table = QUICK if args.quick else SCENARIOS
    up_port = free_port()
    upstream_proc = subprocess.Popen([sys.executable, "-m", "bench.upstream", str(up_port)])
    upstream = f"http://127.0.0.1:{up_port}"
    logdir = Path(tempfile.mkdtemp(prefix="sseproxy-bench-"))
    everything: dict[str, dict[str, list[dict[str, float]]]] = {}
    print(
        f"# {platform.node()}: {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}; medians of {args.rounds} rounds"
    )
    try:
        wait_port(up_port)
        for key in args.scenarios.split(","):
            s = table[key]
            results: dict[str, list[dict[str, float]]] = {"direct": [], "naive": [], "sseproxy": []}
            kinds = list(results)
            for round_ in range(args.rounds):
                order = kinds[round_ % 3 :] + kinds[: round_ % 3]  # rotate who goes first
                for kind in order:
                    results[kind].append(measure(kind, s, upstream, logdir))
            everything[key] = results
            report(s, results)
    finally:
        upstream_proc.terminate()
        upstream_proc.wait(30)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
