"""AWS event stream throughput: `python -m bench.eventstream`.

A synthetic Bedrock ConverseStream (~4 MB of `contentBlockDelta` messages, as Bedrock frames
them) cut into random reads of 1-4096 bytes with a fixed seed, fed to botocore's own
`EventStreamBuffer` (what boto3 runs), to sseproxy's `EventStreamDecoder` alone, and to the
full tap (framing + JSON + Converse assembly). Rounds are interleaved; medians reported.
Needs boto3 (the `test` extra).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from collections.abc import Callable

from botocore.eventstream import EventStreamBuffer

from sseproxy.core import Dialect, StreamTap
from sseproxy.core.eventstream import EventStreamDecoder, event

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "Bedrock",
    "streams",
    "tokens",
]


def synthetic_stream(target_bytes: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    parts = [event("messageStart", b'{"role":"assistant","p":"abcdefgh"}')]
    size = 0
    while size < target_bytes:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        payload = {"contentBlockIndex": 0, "delta": {"text": text}, "p": "abcdefghijklmnop"}
        parts.append(event("contentBlockDelta", json.dumps(payload).encode()))
        size += len(parts[-1])
    parts.append(event("contentBlockStop", b'{"contentBlockIndex":0}'))
    parts.append(event("messageStop", b'{"stopReason":"end_turn"}'))
    usage = {"usage": {"inputTokens": 10, "outputTokens": 999, "totalTokens": 1009}}
    parts.append(event("metadata", json.dumps(usage).encode()))
    return b"".join(parts)


def chunked(data: bytes, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 4096)
        out.append(data[i : i + n])
        i += n
    return out


def run_botocore(chunks: list[bytes]) -> int:
    buffer, n = EventStreamBuffer(), 0
    for chunk in chunks:
        buffer.add_data(chunk)
        for _ in buffer:
            n += 1
    return n


def run_decoder(chunks: list[bytes]) -> int:
    decoder, n = EventStreamDecoder(), 0
    for chunk in chunks:
        n += len(decoder.feed(chunk))
    decoder.finish()
    return n


def run_tap(chunks: list[bytes]) -> int:
    tap = StreamTap(Dialect.BEDROCK_CONVERSE, content_type="application/vnd.amazon.eventstream")
    for chunk in chunks:
        tap.feed(chunk)
    verdict = tap.close()
    assert verdict.state == "completed", verdict
    return verdict.events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    data = synthetic_stream(int(args.megabytes * 1e6))
    chunks = chunked(data)
    candidates: dict[str, Callable[[list[bytes]], int]] = {
        "botocore EventStreamBuffer": run_botocore,
        "sseproxy EventStreamDecoder": run_decoder,
        "sseproxy tap (decoder + Converse)": run_tap,
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    counts: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, run in candidates.items():
            start = time.process_time()
            counts[name] = run(chunks)
            times[name].append(time.process_time() - start)
    print(
        f"# {platform.python_implementation()} {platform.python_version()} on "
        f"{platform.machine()}, {len(data) / 1e6:.1f} MB, {len(chunks)} reads, median CPU "
        f"time of {args.rounds} interleaved rounds"
    )
    print("| reader | MB/s | messages/s | messages |")
    print("|---|---:|---:|---:|")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(
            f"| {name} | {len(data) / 1e6 / median:,.0f} | {counts[name] / median:,.0f} "
            f"| {counts[name]} |"
        )


if __name__ == "__main__":
    main()
