"""`sseproxy replay`: feed a saved response body through the core, as the proxy would."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from sseproxy.capture.format import UNFINISHED_REASON, partial_of, recorded_chunks
from sseproxy.core import (
    Dialect,
    EndReason,
    SSEDecoder,
    SSEEvent,
    StreamTap,
    TapOptions,
    with_transport,
)
from sseproxy.core.tap import Framing
from sseproxy.observe.log import one_line

EXIT_COMPLETED = 0
EXIT_NOT_COMPLETED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3  # the capture holds only the body's first bytes: no verdict of the whole
# The end a replay of a partial capture gives the tap: its bytes stop where the file does.
CAPTURE_TRUNCATED = "capture_truncated"
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


def replay(
    data: bytes,
    options: ReplayOptions,
    out: TextIO = sys.stdout,
    capture: dict[str, Any] | None = None,
    err: TextIO = sys.stderr,
) -> int:
    """Feed `data` through the core and print the verdict. With a capture sidecar, the
    recorded chunking, dialect, encoding, status and ending are used unless options say
    otherwise, so the recorded verdict is reproduced. A capture cut at its size cap, or left
    unfinished by a proxy that stopped mid-stream, is replayed as far as it goes, said so
    (`partial_capture`), and exits `EXIT_PARTIAL`."""
    dialect, encoding, end, status = options.dialect, None, str(EndReason.END_OF_INPUT), None
    http_complete: bool | None = True  # a saved body file is taken as the whole body
    pieces: Iterable[bytes] = chunks(data, options)
    partial = None
    if capture is not None:
        recorded_dialect = capture.get("dialect")  # None: unknown when an unfinished one began
        dialect = dialect or (Dialect(recorded_dialect) if recorded_dialect else None)
        encoding = capture.get("content_encoding")
        end = capture.get("end") or end
        status = capture.get("status")
        recorded = capture.get("http_complete", True)
        http_complete = recorded if recorded is None or isinstance(recorded, bool) else True
        if options.chunk_size is None and options.random_seed is None:
            pieces = recorded_chunks(capture, data)
        partial = partial_of(capture, data)
        if partial is not None:  # the bytes stop where the file does, short of the body
            unended = partial[1] == UNFINISHED_REASON  # the interruption says which
            end, http_complete = UNFINISHED_REASON if unended else CAPTURE_TRUNCATED, False
    tap = StreamTap(dialect, content_encoding=encoding, options=TapOptions())
    events = SSEDecoder() if options.events and not encoding else None
    lines: list[bytes] = []
    for chunk in pieces:
        tap.feed(chunk)
        if events is not None:
            for frame in events.feed(chunk):
                if not isinstance(frame, SSEEvent):
                    continue  # a comment
                record = {"type": frame.type, "data": frame.data, "id": frame.id}
                lines.append(one_line(orjson.dumps(record)))  # one line per event, always
    verdict = with_transport(tap.close(end, http_complete=http_complete), status, end)
    if events is not None and tap.framing is Framing.SSE:
        for line in lines:
            out.write(line.decode() + "\n")
    if options.content:
        out.write(orjson.dumps({"content": tap.describe()}).decode() + "\n")
    result = verdict.to_dict()
    if partial is not None:
        at, reason = partial
        result["partial_capture"] = {"truncated_at": at, "reason": reason}
        why = ": the proxy stopped before the stream ended" if reason == UNFINISHED_REASON else ""
        err.write(
            f"sseproxy replay: partial capture: the body file stops at byte {at} "
            f"({reason}{why}); the verdict is of those bytes only\n"
        )
    out.write(orjson.dumps(result).decode() + "\n")
    if partial is not None:
        return EXIT_PARTIAL
    return EXIT_COMPLETED if verdict.state == "completed" else EXIT_NOT_COMPLETED
