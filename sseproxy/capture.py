"""Capture to disk: each response body exactly as received, and a JSON sidecar with its chunk
timing and verdict, so a failure seen once can be replayed (`sseproxy replay X.json`) or served
to an app again (`sseproxy mock`). Bounded per capture and for the whole directory.

Nothing is written unredacted: headers off the allowlist are redacted, the request's credential
values are masked in the body files with as many bytes (offsets and replay stay exact), and the
sidecar goes through the request's `Secrets` as a whole."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from .core.encoding import BodyDecoder, ContentDecodingError
from .log import json_safe
from .redact import REDACTED, SENSITIVE_NAME, Secrets

if TYPE_CHECKING:
    from .session_capture import SessionCapture

logger = structlog.get_logger("sseproxy")
FORMAT_VERSION = 1
# Chunk index entries kept per capture; past it the body is still captured up to its cap.
MAX_INDEX_ENTRIES = 200_000
# Decoded bytes of one compressed capture searched for credentials; beyond, it is withheld.
MAX_DECODED_CHECK_BYTES = 64 * 1024 * 1024
# Why a capture's body file stops before the body did (`truncated_reason` in the sidecar).
TRUNCATED_REASON = "capture_max_bytes"
# Captures this process saved that the inspector can find by request id (newest kept).
MAX_SAVED_NAMES = 10_000


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    directory: Path
    max_bytes: int = 8 * 1024 * 1024
    max_total_bytes: int = 512 * 1024 * 1024
    request_bodies: bool = False


# Headers kept verbatim: what a replay or a bug report needs, never a credential.
VERBATIM_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "cache-control",
        "cf-ray",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "date",
        "keep-alive",
        "request-id",
        "retry-after",
        "server",
        "transfer-encoding",
        "user-agent",
        "vary",
        "via",
        "x-amzn-requestid",
        "x-generation-id",
        "x-goog-request-id",
        "x-request-id",
    }
)
# Families kept verbatim too (rate limits name their `tokens`), unless the name says credential.
VERBATIM_PREFIXES = ("openai-", "anthropic-ratelimit-", "x-ratelimit-", "x-stainless-")
_CREDENTIAL_NAME = re.compile(r"auth|key|secret|cookie|session|password", re.IGNORECASE)


def redact_headers(headers: Mapping[str, str], secrets: Secrets) -> dict[str, str]:
    """Headers as a capture keeps them: the allowlist verbatim, any name that says credential
    (auth, key, token, secret, cookie, session) redacted, the rest through `secrets`."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in VERBATIM_HEADERS or (
            lower.startswith(VERBATIM_PREFIXES) and not _CREDENTIAL_NAME.search(lower)
        ):
            out[str(name)] = value
        elif SENSITIVE_NAME.search(lower):
            out[str(name)] = REDACTED
        else:
            out[str(name)] = secrets.redact_text(value)
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
        # Where the body file stops, when the cap stopped it: nothing after it is stored, so
        # the file is always the body's first bytes (never a later small chunk after a gap).
        self.truncated_at: int | None = None

    @property
    def truncated(self) -> bool:
        return self.truncated_at is not None

    def chunk(self, data: bytes, now: float) -> None:
        if len(self.index) < MAX_INDEX_ENTRIES:
            self.index.append((self.offset, len(data), round((now - self.start) * 1000, 3)))
        self.offset += len(data)
        if self.truncated_at is not None:
            return
        if self.size + len(data) <= self.settings.max_bytes:
            self.parts.append(data)
            self.size += len(data)
        else:
            self.truncated_at = self.size

    def sidecar(
        self, meta: dict[str, Any], body_file: str, withheld: str | None = None
    ) -> dict[str, Any]:
        return {
            "format": "sseproxy-capture",
            "version": FORMAT_VERSION,
            "request_id": self.request_id,
            "started_at": self.started_at,
            **meta,
            "body_file": body_file,
            "body_bytes": 0 if withheld else self.size,
            "truncated": self.truncated,
            **(
                {"truncated_at": self.truncated_at, "truncated_reason": TRUNCATED_REASON}
                if self.truncated_at is not None
                else {}
            ),
            **({"body_withheld": withheld} if withheld else {}),
            "chunks": self.index,
        }


class CaptureStore:
    def __init__(self, settings: CaptureSettings) -> None:
        """Raises OSError when the directory cannot be created or written to."""
        self.settings = settings
        settings.directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=settings.directory):
            pass  # a directory we cannot write to fails now, not at the first capture
        self.pending: set[asyncio.Task[None]] = set()
        self._trim = threading.Lock()  # writer threads trim the directory one at a time
        # request id -> the file stem of its capture, for the inspector's download links
        # request or session id -> (stem, the second file's suffix: the body, or the messages)
        self._saved: OrderedDict[str, tuple[str, str]] = OrderedDict()

    @classmethod
    def open(cls, settings: CaptureSettings) -> CaptureStore | None:
        """The store, or None with one warning when its directory is unusable: the proxy
        still starts, without capture."""
        try:
            return cls(settings)
        except OSError as exc:
            logger.warning(
                "capture.disabled",
                directory=str(settings.directory),
                error=f"{type(exc).__name__}: {exc.strerror or exc}",
            )
            return None

    def new(self, request_id: str, start: float) -> Capture:
        return Capture(self.settings, request_id, start)

    def request_body(self, body: bytes) -> str | None:
        return base64.b64encode(body).decode() if self.settings.request_bodies else None

    def session(self, session_id: str, start: float) -> SessionCapture:
        from .session_capture import SessionCapture

        return SessionCapture(self.settings, session_id, start)

    def save(self, capture: Capture, meta: dict[str, Any], secrets: Secrets) -> None:
        """Write in a worker thread: disk latency never touches the event loop. Everything
        written goes through `secrets`, whether or not `meta` was redacted already."""
        self._in_thread(self._write, capture, meta, secrets)

    def save_session(self, capture: SessionCapture, meta: dict[str, Any], secrets: Secrets) -> None:
        """A WebSocket session's capture, written as `save` writes a request's."""
        self._in_thread(self._write_session, capture, meta, secrets)

    def _in_thread(self, write: Callable[..., None], *args: Any) -> None:
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(write, *args))
        self.pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("capture.failed", error=repr(task.exception()))

    async def drain(self) -> None:
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)

    def _write(self, capture: Capture, meta: dict[str, Any], secrets: Secrets) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(capture.started_at))
        stem = f"{stamp}-{capture.request_id}"
        directory = self.settings.directory
        body, withheld = masked_body(capture, meta.get("content_encoding"), secrets)
        (directory / f"{stem}.body").write_bytes(body)
        request_body = meta.get("request_body_base64")
        if isinstance(request_body, str):
            masked = secrets.mask(base64.b64decode(request_body))
            meta = {**meta, "request_body_base64": base64.b64encode(masked).decode()}
        sidecar = capture.sidecar(secrets.redact(meta), f"{stem}.body", withheld)
        partial = directory / f".{stem}.json.partial"
        try:
            text = orjson.dumps(sidecar, option=orjson.OPT_INDENT_2, default=str)
        except TypeError:  # what JSON cannot carry (a non-UTF-8 header value, ...) replaced
            text = orjson.dumps(json_safe(sidecar), option=orjson.OPT_INDENT_2, default=str)
        partial.write_bytes(text)
        partial.rename(directory / f"{stem}.json")  # readers never see a half-written sidecar
        self._remember(capture.request_id, stem, ".body")

    def _remember(self, key: str, stem: str, suffix: str) -> None:
        with self._trim:
            self._saved[key] = (stem, suffix)
            while len(self._saved) > MAX_SAVED_NAMES:
                self._saved.popitem(last=False)
            self._enforce_total()

    def _write_session(
        self, capture: SessionCapture, meta: dict[str, Any], secrets: Secrets
    ) -> None:
        from .session_capture import MESSAGES_SUFFIX, write_session

        stem = write_session(self.settings.directory, capture, meta, secrets)
        self._remember(capture.session_id, stem, MESSAGES_SUFFIX)

    def files_of(self, request_id: str) -> tuple[Path, Path] | None:
        """The sidecar and the body (or a session's messages) file this process saved for
        `request_id` (or a session id), if it still has them. Only names the store made
        itself: an id is a key, never a path."""
        with self._trim:
            saved = self._saved.get(request_id)
        if saved is None:
            return None
        stem, suffix = saved
        sidecar = self.settings.directory / f"{stem}.json"
        if not sidecar.is_file():
            return None
        return sidecar, self.settings.directory / f"{stem}{suffix}"

    def _enforce_total(self) -> None:
        """Delete the oldest captures until the directory is under its cap."""
        files = []
        with os.scandir(self.settings.directory) as entries:
            for entry in entries:
                if entry.name.endswith((".body", ".json", ".jsonl")):
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


def masked_body(
    capture: Capture, encoding: str | None, secrets: Secrets
) -> tuple[bytes, str | None]:
    """The body to write, and why it is withheld if it is.

    The whole body is masked at once, so a value split across two chunks is still found. A
    compressed body cannot be masked in place without breaking it: it is searched decoded,
    and withheld (an empty body file) when it holds a credential or cannot be searched."""
    body = b"".join(capture.parts)
    if not secrets.values:
        return body, None
    try:
        decoder = BodyDecoder(encoding if isinstance(encoding, str) else None)
    except ContentDecodingError as exc:
        return b"", f"cannot be searched for credentials: {exc}"
    if decoder.identity:
        return secrets.mask(body, cut=capture.truncated), None
    longest = max(len(raw) for raw in secrets.raw)
    tail, decoded = b"", 0
    try:
        piece = decoder.decode(body)
        while True:
            decoded += len(piece)
            if decoded > MAX_DECODED_CHECK_BYTES:
                return b"", "decodes to more than can be searched for credentials"
            window = tail + piece
            if secrets.found_in(window):
                return b"", f"{decoder.encoding} body holds a credential of the request"
            tail = window[-(longest - 1) :]
            if not decoder.pending:
                break
            piece = decoder.decode(b"")
    except ContentDecodingError:
        pass  # what did decode was searched; the rest is undecodable for everyone
    return body, None


def load_capture(path: Path) -> tuple[dict[str, Any], bytes]:
    """The sidecar and its body; raises ValueError when the file is not a capture."""
    sidecar = orjson.loads(path.read_bytes())
    if not isinstance(sidecar, dict) or sidecar.get("format") != "sseproxy-capture":
        raise ValueError(f"{path} is not an sseproxy capture")
    if "body_file" not in sidecar:
        raise ValueError(f"{path} is a capture without a body (a WebSocket session's?)")
    body = (path.parent / sidecar["body_file"]).read_bytes()
    return sidecar, body


def partial_at(sidecar: dict[str, Any]) -> int | None:
    """Where a capture's body file stops short of the body, or None when it holds it all.
    (Captures from before `truncated_at` say only `truncated`: their file may have holes.)"""
    if not sidecar.get("truncated"):
        return None
    at = sidecar.get("truncated_at")
    return at if isinstance(at, int) and not isinstance(at, bool) else 0


def recorded_chunks(sidecar: dict[str, Any], body: bytes) -> list[bytes]:
    """The body cut exactly as it arrived (the rest in one piece if the index was capped)."""
    out = [body[offset : offset + size] for offset, size, _ in sidecar["chunks"]]
    covered = sum(len(c) for c in out)
    if covered < len(body):
        out.append(body[covered:])
    return [c for c in out if c]
