"""Soak: steady load through sseproxy for a while, its RSS sampled over time.

`python -m bench.soak [--minutes 10] [--streams 200]` prints one line per sample and a verdict
on growth. Loopback only; stops by itself.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.proxy import free_port, peak_rss_mb, start_proxy, wait_port


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--sample-seconds", type=float, default=30)
    args = parser.parse_args()
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.upstream", str(up_port)])
    proxy: subprocess.Popen[bytes] | None = None
    logdir = Path(tempfile.mkdtemp(prefix="sseproxy-soak-"))
    load: subprocess.Popen[bytes] | None = None
    try:
        wait_port(up_port)
        proxy, port = start_proxy("sseproxy", f"http://127.0.0.1:{up_port}", logdir)
        deadline = time.monotonic() + args.minutes * 60
        next_sample = time.monotonic()
        samples: list[float] = []
        batches = 0
        print("elapsed_s  rss_mb  batches")
        while time.monotonic() < deadline:
            if load is None or load.poll() is not None:
                batches += load is not None
                load = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench.loadgen",
                        f"http://127.0.0.1:{port}",
                        "--streams",
                        str(args.streams),
                        "--events",
                        "100",
                        "--interval-ms",
                        "20",
                        "--spread",
                        "1",
                    ],
                    stdout=subprocess.DEVNULL,
                )
            if time.monotonic() >= next_sample:
                samples.append(rss_mb(proxy.pid))
                elapsed = args.minutes * 60 - (deadline - time.monotonic())
                print(f"{elapsed:9.0f}  {samples[-1]:6.1f}  {batches:7d}", flush=True)
                next_sample += args.sample_seconds
            time.sleep(0.5)
        half = samples[len(samples) // 2 :]
        spread = max(half) - min(half)
        print(
            f"first {samples[0]:.1f} MB, last {samples[-1]:.1f} MB, second-half spread "
            f"{spread:.1f} MB, peak {peak_rss_mb(proxy.pid):.1f} MB"
        )
    finally:
        for proc in (load, proxy, upstream):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)


if __name__ == "__main__":
    main()
