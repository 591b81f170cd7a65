"""`sseproxy replay`: feed a saved response body through the core, as the proxy would."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

import orjson

from .core import Dialect, EndReason, SSEDecoder, SSEEvent, StreamTap, TapOptions
from .core.tap import Framing

EXIT_COMPLETED = 0
EXIT_NOT_COMPLETED = 1
EXIT_USAGE = 2
# Random chunk sizes span one byte (every split point) to a typical socket read.
RANDOM_CHUNK_MAX = 4096


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    dialect: Dialect | None = None
    chunk_size: int | None = None
    random_seed: int | None = None
    events: bool = False
    content: bool = False


def chunks(data: bytes, options: ReplayOptions) -> Iterator[bytes]:
    if options.random_seed is not None:
        rng = random.Random(options.random_seed)
        i = 0
        while i < len(data):
            n = rng.randint(1, RANDOM_CHUNK_MAX)
            yield data[i : i + n]
            i += n
    elif options.chunk_size:
        for i in range(0, len(data), options.chunk_size):
            yield data[i : i + options.chunk_size]
    elif data:
        yield data


def replay(data: bytes, options: ReplayOptions, out: TextIO = sys.stdout) -> int:
    tap = StreamTap(options.dialect, options=TapOptions())
    events = SSEDecoder() if options.events else None
    lines: list[bytes] = []
    for chunk in chunks(data, options):
        tap.feed(chunk)
        if events is not None:
            for frame in events.feed(chunk):
                if not isinstance(frame, SSEEvent):
                    continue  # a comment
                record = {"type": frame.type, "data": frame.data, "id": frame.id}
                lines.append(orjson.dumps(record))
    verdict = tap.close(EndReason.END_OF_INPUT)
    if events is not None and tap.framing is Framing.SSE:
        for line in lines:
            out.write(line.decode() + "\n")
    if options.content:
        out.write(orjson.dumps({"content": tap.describe()}).decode() + "\n")
    out.write(orjson.dumps(verdict.to_dict()).decode() + "\n")
    return EXIT_COMPLETED if verdict.state == "completed" else EXIT_NOT_COMPLETED
