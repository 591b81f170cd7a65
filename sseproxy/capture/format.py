"""The capture format: what a sidecar says and how its files are named and read.

A leaf that the HTTP store (`store`), WebSocket session captures (`sessions`), replay and mock
all use, so that none of them imports another to reach it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sseproxy.observe.log import json_safe

FORMAT_VERSION = 1
# Why a capture's body file stops before the body did (`truncated_reason` in the sidecar):
# its cap, or the writer thread too far behind (the store's queue full: `capture_writer`).
TRUNCATED_REASON = "capture_max_bytes"
WRITER_BEHIND_REASON = "capture_writer_behind"
# Why a replay calls a capture partial whose sidecar still says `complete: false`: the proxy
# stopped (was killed) before the stream ended, and its files hold what had come by then.
UNFINISHED_REASON = "capture_unfinished"


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    directory: Path
    max_bytes: int = 8 * 1024 * 1024
    max_total_bytes: int = 512 * 1024 * 1024
    request_bodies: bool = False


def stem_of(started_at: float, key: str) -> str:
    """A capture's files' name without suffix: when it started (UTC), then its id."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(started_at))}-{key}"


def write_sidecar(directory: Path, stem: str, sidecar: dict[str, Any]) -> None:
    """`STEM.json`, renamed into place: readers never see half of one (the one written at the
    start is replaced whole at the end)."""
    partial = directory / f".{stem}.json.partial"
    try:
        text = orjson.dumps(sidecar, option=orjson.OPT_INDENT_2, default=str)
    except TypeError:  # what JSON cannot carry (a non-UTF-8 header value, ...) replaced
        text = orjson.dumps(json_safe(sidecar), option=orjson.OPT_INDENT_2, default=str)
    partial.write_bytes(text)
    partial.rename(directory / f"{stem}.json")


def load_capture(path: Path) -> tuple[dict[str, Any], bytes]:
    """The sidecar and its body; raises ValueError when the file is not a capture."""
    sidecar = orjson.loads(path.read_bytes())
    if not isinstance(sidecar, dict) or sidecar.get("format") != "sseproxy-capture":
        raise ValueError(f"{path} is not an sseproxy capture")
    if "body_file" not in sidecar:
        raise ValueError(f"{path} is a capture without a body (a WebSocket session's?)")
    body = (path.parent / sidecar["body_file"]).read_bytes()
    return sidecar, body


def unfinished(sidecar: dict[str, Any]) -> bool:
    """The proxy stopped before this capture's stream ended: its sidecar is the one written at
    the start. (Captures from before `complete` are complete.)"""
    return sidecar.get("complete") is False


def partial_at(sidecar: dict[str, Any]) -> int | None:
    """Where a capture's body file stops short of the body, or None when it holds it all.
    (Captures from before `truncated_at` say only `truncated`: their file may have holes.)"""
    if not sidecar.get("truncated"):
        return None
    at = sidecar.get("truncated_at")
    return at if isinstance(at, int) and not isinstance(at, bool) else 0


def partial_of(sidecar: dict[str, Any], body: bytes) -> tuple[int, str] | None:
    """Where the body file stops short of the body and why (`truncated_reason`, or
    `capture_unfinished`), or None when it holds the whole body."""
    if unfinished(sidecar):
        return len(body), UNFINISHED_REASON
    at = partial_at(sidecar)
    if at is None:
        return None
    reason = sidecar.get("truncated_reason")
    return at, reason if isinstance(reason, str) else TRUNCATED_REASON


def recorded_chunks(sidecar: dict[str, Any], body: bytes) -> list[bytes]:
    """The body cut exactly as it arrived (the rest in one piece if the index was capped)."""
    out = [body[offset : offset + size] for offset, size, _ in sidecar["chunks"]]
    covered = sum(len(c) for c in out)
    if covered < len(body):
        out.append(body[covered:])
    return [c for c in out if c]
