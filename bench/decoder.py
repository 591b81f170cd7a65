"""Decoder throughput, side by side in one run: `python -m bench.decoder`.

A synthetic Chat Completions stream (CJK text, ~6.5 MB) cut into random chunks of 1-4096 bytes
with a fixed seed is fed to: a naive bytes split (incorrect: ignores CR and multi-line data),
openai-python's SSE decoder, httpx-sse's decoder, sseproxy's framing decoder alone (and with
its LF-only block path turned off), and sseproxy's full tap (framing + JSON + Chat assembly).
Rounds are interleaved; medians reported.
Needs the `bench` extra (httpx-sse, openai).
"""

from __future__ import annotations

import argparse
import codecs
import gc
import json
import platform
import random
import statistics
import time
from collections.abc import Callable

from sseproxy.core import Dialect, SSEDecoder, StreamTap

CJK = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜"


def synthetic_stream(target_bytes: int, seed: int = 42) -> bytes:
    rng = random.Random(seed)
    parts = []
    size = 0
    while size < target_bytes:
        text = "".join(rng.choice(CJK) for _ in range(rng.randint(1, 8)))
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-4o-2024-08-06",
            "system_fingerprint": "fp_bench",
            "choices": [
                {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
            ],
        }
        # Compact, as OpenAI sends it.
        body = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
        line = ("data: " + body + "\n\n").encode()
        parts.append(line)
        size += len(line)
    final = {
        "id": "chatcmpl-bench",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    parts.append(("data: " + json.dumps(final) + "\n\ndata: [DONE]\n\n").encode())
    return b"".join(parts)


def random_chunks(data: bytes, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 4096)
        out.append(data[i : i + n])
        i += n
    return out


def naive_split(chunks: list[bytes]) -> int:
    buffer, events = b"", 0
    for chunk in chunks:
        buffer += chunk
        *blocks, buffer = buffer.split(b"\n\n")
        events += len(blocks)
    return events


def openai_decoder(chunks: list[bytes]) -> int:
    from openai._streaming import SSEDecoder as OpenAIDecoder

    return sum(1 for _ in OpenAIDecoder().iter_bytes(iter(chunks)))


def httpx_sse_decoder(chunks: list[bytes]) -> int:
    from httpx_sse._decoders import SSEDecoder as HttpxDecoder
    from httpx_sse._decoders import SSELineDecoder

    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    lines, decoder, events = SSELineDecoder(), HttpxDecoder(), 0
    for chunk in chunks:
        for line in lines.decode(text.decode(chunk)):
            if decoder.decode(line) is not None:
                events += 1
    return events


def sseproxy_decoder(chunks: list[bytes]) -> int:
    decoder, events = SSEDecoder(), 0
    for chunk in chunks:
        events += len(decoder.feed(chunk))
    decoder.finish()
    return events


def sseproxy_line_path(chunks: list[bytes]) -> int:
    decoder, events = SSEDecoder(block_path=False), 0
    for chunk in chunks:
        events += len(decoder.feed(chunk))
    decoder.finish()
    return events


def sseproxy_tap(chunks: list[bytes]) -> int:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    for chunk in chunks:
        tap.feed(chunk)
    verdict = tap.close()
    assert verdict.state == "completed", verdict
    return verdict.events


CANDIDATES: dict[str, Callable[[list[bytes]], int]] = {
    "naive bytes split (incorrect)": naive_split,
    "openai-python SSEDecoder": openai_decoder,
    "httpx-sse": httpx_sse_decoder,
    "sseproxy SSEDecoder": sseproxy_decoder,
    "sseproxy SSEDecoder, line path only": sseproxy_line_path,
    "sseproxy tap (framing + JSON + Chat)": sseproxy_tap,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=float, default=6.5)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    data = synthetic_stream(int(args.megabytes * 1024 * 1024))
    chunks = random_chunks(data)
    times: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    counts: dict[str, int] = {}
    gc.disable()  # a collection landing in one candidate's run would skew that round
    for _ in range(args.rounds):
        for name, fn in CANDIDATES.items():
            start = time.process_time()  # CPU time: steadier than wall time on a shared VM
            counts[name] = fn(chunks)
            times[name].append(time.process_time() - start)
        gc.collect()
    mb = len(data) / 1e6
    print(
        f"# {platform.python_implementation()} {platform.python_version()} on "
        f"{platform.machine()}, {len(data) / 1e6:.1f} MB, {len(chunks)} chunks, "
        f"median CPU time of {args.rounds} interleaved rounds"
    )
    print("| decoder | MB/s | events/s | events | vs httpx-sse | vs openai |")
    print("|---|---:|---:|---:|---:|---:|")
    base_httpx = statistics.median(times["httpx-sse"])
    base_openai = statistics.median(times["openai-python SSEDecoder"])
    for name, samples in times.items():
        t = statistics.median(samples)
        print(
            f"| {name} | {mb / t:.0f} | {counts[name] / t:,.0f} | {counts[name]} "
            f"| {base_httpx / t:.2f}x | {base_openai / t:.2f}x |"
        )


if __name__ == "__main__":
    main()
