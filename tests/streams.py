"""Small builders for hand-written streams, so each test reads like the wire."""

from __future__ import annotations

import json
import random
from typing import Any

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions, Verdict
from sseproxy.core.request import RequestFacts


def sse(*events: Any, event: str | None = None) -> bytes:
    """Each argument is a JSON-able payload, a raw string, or an (event_name, payload) pair."""
    out = []
    for item in events:
        name = event
        if isinstance(item, tuple):
            name, item = item
        data = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        out.append((f"event: {name}\n" if name else "") + f"data: {data}\n\n")
    return "".join(out).encode()


def chat_chunk(
    content: str | None = None,
    finish: str | None = None,
    response_id: str = "c1",
    model: str = "m",
) -> dict[str, Any]:
    """One Chat Completions chunk for choice 0."""
    delta = {"content": content} if content is not None else {}
    return {
        "id": response_id,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def random_split(data: bytes, seed: Any, largest: int) -> list[bytes]:
    """`data` cut into pieces of 1..`largest` bytes, reproducibly for a seed."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, largest)
        out.append(data[i : i + n])
        i += n
    return out


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """`data` cut at `points` (taken modulo its length + 1): any chunking, for properties."""
    bounds = sorted({p % (len(data) + 1) for p in points})
    out, last = [], 0
    for b in bounds:
        out.append(data[last:b])
        last = b
    out.append(data[last:])
    return out


def ndjson(*objects: Any) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objects)


def verdict_of(
    data: bytes,
    dialect: Dialect | None = None,
    end: EndReason = EndReason.END_OF_INPUT,
    bytewise: bool = True,
    *,
    http_complete: bool | None = True,
    content_type: str | None = None,
    request: RequestFacts | None = None,
) -> Verdict:
    """The verdict, after checking that byte-at-a-time delivery gives the very same one."""

    def tap() -> StreamTap:
        options = TapOptions(strict=True)
        return StreamTap(dialect, content_type=content_type, options=options, request=request)

    whole = tap()
    whole.feed(data)
    result = whole.close(end, http_complete=http_complete)
    if bytewise:
        split = tap()
        for i in range(len(data)):
            split.feed(data[i : i + 1])
        assert split.close(end, http_complete=http_complete) == result
    return result
