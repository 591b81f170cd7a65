"""Capture to disk: each response body exactly as received, and a JSON sidecar with its chunk
timing and verdict, so a failure seen once can be replayed (`sseproxy replay X.json`) or served
to an app again (`sseproxy mock`). Bounded per capture and for the whole directory."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from .redact import REDACTED, SECRET_KEYS

logger = structlog.get_logger("sseproxy")
FORMAT_VERSION = 1
# Chunk index entries kept per capture; past it the body is still captured up to its cap.
MAX_INDEX_ENTRIES = 200_000


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    directory: Path
    max_bytes: int = 8 * 1024 * 1024
    max_total_bytes: int = 512 * 1024 * 1024
    request_bodies: bool = False


def redact_headers(headers: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.items():
        out[str(name)] = REDACTED if name.lower() in SECRET_KEYS else value
    return out


class Capture:
    """What one request captures in memory until it ends (bounded by `max_bytes`)."""

    def __init__(self, settings: CaptureSettings, request_id: str, start: float) -> None:
        self.settings = settings
        self.request_id = request_id
        self.start = start
        self.started_at = time.time()
        self.parts: list[bytes] = []
        self.size = 0
        self.offset = 0
        self.index: list[tuple[int, int, float]] = []
        self.truncated = False

    def chunk(self, data: bytes, now: float) -> None:
        if len(self.index) < MAX_INDEX_ENTRIES:
            self.index.append((self.offset, len(data), round((now - self.start) * 1000, 3)))
        self.offset += len(data)
        if self.size + len(data) <= self.settings.max_bytes:
            self.parts.append(data)
            self.size += len(data)
        else:
            self.truncated = True

    def sidecar(self, meta: dict[str, Any], body_file: str) -> dict[str, Any]:
        return {
            "format": "sseproxy-capture",
            "version": FORMAT_VERSION,
            "request_id": self.request_id,
            "started_at": self.started_at,
            **meta,
            "body_file": body_file,
            "body_bytes": self.size,
            "truncated": self.truncated,
            "chunks": self.index,
        }


class CaptureStore:
    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        settings.directory.mkdir(parents=True, exist_ok=True)
        self.pending: set[asyncio.Task[None]] = set()
        self._trim = threading.Lock()  # writer threads trim the directory one at a time

    def new(self, request_id: str, start: float) -> Capture:
        return Capture(self.settings, request_id, start)

    def request_body(self, body: bytes) -> str | None:
        return base64.b64encode(body).decode() if self.settings.request_bodies else None

    def save(self, capture: Capture, meta: dict[str, Any]) -> None:
        """Write in a worker thread: disk latency never touches the event loop."""
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._write, capture, meta))
        self.pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("capture.failed", error=repr(task.exception()))

    async def drain(self) -> None:
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)

    def _write(self, capture: Capture, meta: dict[str, Any]) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(capture.started_at))
        stem = f"{stamp}-{capture.request_id}"
        directory = self.settings.directory
        (directory / f"{stem}.body").write_bytes(b"".join(capture.parts))
        sidecar = capture.sidecar(meta, f"{stem}.body")
        partial = directory / f".{stem}.json.partial"
        partial.write_bytes(orjson.dumps(sidecar, option=orjson.OPT_INDENT_2, default=str))
        partial.rename(directory / f"{stem}.json")  # readers never see a half-written sidecar
        with self._trim:
            self._enforce_total()

    def _enforce_total(self) -> None:
        """Delete the oldest captures until the directory is under its cap."""
        files = []
        with os.scandir(self.settings.directory) as entries:
            for entry in entries:
                if entry.name.endswith((".body", ".json")):
                    with contextlib.suppress(FileNotFoundError):  # a concurrent deletion
                        stat = entry.stat()
                        files.append((stat.st_mtime, stat.st_size, entry.path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.settings.max_total_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                total -= size


def load_capture(path: Path) -> tuple[dict[str, Any], bytes]:
    """The sidecar and its body; raises ValueError when the file is not a capture."""
    sidecar = orjson.loads(path.read_bytes())
    if not isinstance(sidecar, dict) or sidecar.get("format") != "sseproxy-capture":
        raise ValueError(f"{path} is not an sseproxy capture")
    body = (path.parent / sidecar["body_file"]).read_bytes()
    return sidecar, body


def recorded_chunks(sidecar: dict[str, Any], body: bytes) -> list[bytes]:
    """The body cut exactly as it arrived (the rest in one piece if the index was capped)."""
    out = [body[offset : offset + size] for offset, size, _ in sidecar["chunks"]]
    covered = sum(len(c) for c in out)
    if covered < len(body):
        out.append(body[covered:])
    return [c for c in out if c]
