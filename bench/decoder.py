"""Decoder throughput, side by side in one run: `python -m bench.decoder`.

Two synthetic streams of CJK text (~6.5 MB each): Chat Completions (`data:` lines only) and
Anthropic Messages (an `event:` line before every `data:` line), each cut into random chunks
of 1-4096 bytes with a fixed seed, are fed to: a naive bytes split (incorrect: ignores CR and
multi-line data), openai-python's SSE decoder, httpx-sse's decoder, sseproxy's framing decoder
alone (and with its LF-only block path turned off), and sseproxy's full tap (framing + JSON +
assembly). Rounds are interleaved; medians reported, one table per stream.
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
from functools import partial
from typing import Any

from sseproxy.core import Dialect, SSEDecoder, StreamTap

CJK = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜"


def synthetic_stream(target_bytes: int, seed: int = 42) -> bytes:
    """Chat Completions: one `data:` line per event."""
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


def typed_stream(target_bytes: int, seed: int = 42) -> bytes:
    """Anthropic Messages: an `event:` line, then one `data:` line, per event."""

    def event(payload: dict[str, Any]) -> bytes:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return f"event: {payload['type']}\ndata: {body}\n\n".encode()

    rng = random.Random(seed)
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    parts = [
        event({"type": "message_start", "message": message}),
        event({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
    ]
    size = sum(map(len, parts))
    while size < target_bytes:
        text = "".join(rng.choice(CJK) for _ in range(rng.randint(1, 8)))
        delta = {"type": "text_delta", "text": text}
        part = event({"type": "content_block_delta", "index": 0, "delta": delta})
        parts.append(part)
        size += len(part)
    parts += [
        event({"type": "content_block_stop", "index": 0}),
        event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 100},
            }
        ),
        event({"type": "message_stop"}),
    ]
    return b"".join(parts)


STREAMS: dict[str, tuple[Callable[[int], bytes], Dialect]] = {
    "Chat Completions (data: lines)": (synthetic_stream, Dialect.OPENAI_CHAT),
    "Anthropic Messages (event: + data: lines)": (typed_stream, Dialect.ANTHROPIC_MESSAGES),
}


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


def sseproxy_tap(chunks: list[bytes], dialect: Dialect) -> int:
    tap = StreamTap(dialect)
    for chunk in chunks:
        tap.feed(chunk)
    verdict = tap.close()
    assert verdict.state == "completed", verdict
    return verdict.events


def candidates(dialect: Dialect) -> dict[str, Callable[[list[bytes]], int]]:
    assembly = "Chat" if dialect is Dialect.OPENAI_CHAT else "Anthropic"
    return {
        "naive bytes split (incorrect)": naive_split,
        "openai-python SSEDecoder": openai_decoder,
        "httpx-sse": httpx_sse_decoder,
        "sseproxy SSEDecoder": sseproxy_decoder,
        "sseproxy SSEDecoder, line path only": sseproxy_line_path,
        f"sseproxy tap (framing + JSON + {assembly})": partial(sseproxy_tap, dialect=dialect),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=float, default=6.5)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--stream", choices=["chat", "anthropic", "both"], default="both", help="which table"
    )
    args = parser.parse_args()
    chosen = {"chat": 0, "anthropic": 1, "both": None}[args.stream]
    runs = []
    for i, (title, (build, dialect)) in enumerate(STREAMS.items()):
        if chosen is None or chosen == i:
            data = build(int(args.megabytes * 1024 * 1024))
            runs.append((title, data, random_chunks(data), candidates(dialect)))
    times: dict[tuple[str, str], list[float]] = {}
    counts: dict[tuple[str, str], int] = {}
    gc.disable()  # a collection landing in one candidate's run would skew that round
    for _ in range(args.rounds):
        for title, _data, chunks, fns in runs:
            for name, fn in fns.items():
                start = time.process_time()  # CPU time: steadier than wall time on a shared VM
                counts[title, name] = fn(chunks)
                times.setdefault((title, name), []).append(time.process_time() - start)
            gc.collect()
    for title, data, chunks, fns in runs:
        mb = len(data) / 1e6
        print(
            f"# {title}: {platform.python_implementation()} {platform.python_version()} on "
            f"{platform.machine()}, {mb:.1f} MB, {len(chunks)} chunks, "
            f"median CPU time of {args.rounds} interleaved rounds"
        )
        print("| decoder | MB/s | events/s | events | vs httpx-sse | vs openai |")
        print("|---|---:|---:|---:|---:|---:|")
        base_httpx = statistics.median(times[title, "httpx-sse"])
        base_openai = statistics.median(times[title, "openai-python SSEDecoder"])
        for name in fns:
            t = statistics.median(times[title, name])
            n = counts[title, name]
            print(
                f"| {name} | {mb / t:.0f} | {n / t:,.0f} | {n} "
                f"| {base_httpx / t:.2f}x | {base_openai / t:.2f}x |"
            )


if __name__ == "__main__":
    main()
