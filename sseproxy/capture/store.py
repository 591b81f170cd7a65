"""Capture to disk: each response body exactly as received, and a JSON sidecar with its chunk
timing and verdict, so a failure seen once can be replayed (`sseproxy replay X.json`) or served
to an app again (`sseproxy mock`). Bounded per capture and for the whole directory.

Written as the stream goes, so a proxy killed mid-stream leaves a partial capture to replay:
the sidecar at the start (`complete: false`, what the request and the response's head said),
the body appended as it arrives (by the store's writer thread, `writer.py`), and the
sidecar replaced at the end (`complete: true`, the chunk index, the verdict and the record).

Nothing is written unredacted: headers off the allowlist are redacted, the request's credential
values are masked in the body files with as many bytes (offsets and replay stay exact), and the
sidecar goes through the request's `Secrets` as a whole."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import structlog

from sseproxy.capture.format import (
    FORMAT_VERSION,
    TRUNCATED_REASON,
    WRITER_BEHIND_REASON,
    CaptureSettings,
    stem_of,
    write_sidecar,
)
from sseproxy.capture.mask import StreamMask
from sseproxy.capture.sessions import (
    MESSAGES_SUFFIX,
    MessagesFile,
    SessionCapture,
    session_head,
    write_session,
)
from sseproxy.capture.writer import Spool, Writer
from sseproxy.observe.redact import NO_SECRETS, REDACTED, Secrets, names_credential

logger = structlog.get_logger("sseproxy")
# Chunk index entries kept per capture; past it the body is still captured up to its cap.
MAX_INDEX_ENTRIES = 200_000
# Captures this process saved that the inspector can find by request id (newest kept).
MAX_SAVED_NAMES = 10_000


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
    (auth, key, token, secret, cookie, session; not a `session-id`, an identifier) redacted,
    the rest through `secrets`."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in VERBATIM_HEADERS or (
            lower.startswith(VERBATIM_PREFIXES) and not _CREDENTIAL_NAME.search(lower)
        ):
            out[str(name)] = value
        elif names_credential(lower):
            out[str(name)] = REDACTED
        else:
            out[str(name)] = secrets.redact_text(value)
    return out


class Capture:
    """One request's capture as the event loop sees it: the chunk index (in memory until the
    end), and the body's bytes sent to its `BodyFile` as they come (or, with no file, as
    `parts` in memory: the whole body written at once by `CaptureStore._write`). Bounded by
    `max_bytes`."""

    def __init__(
        self,
        settings: CaptureSettings,
        request_id: str,
        start: float,
        file: BodyFile | None = None,
    ) -> None:
        self.settings = settings
        self.request_id = request_id
        self.start = start
        self.started_at = time.time()
        self.file = file
        self.parts: list[bytes] = []
        self.size = 0
        self.offset = 0
        self.index: list[tuple[int, int, float]] = []
        # Where the body file stops, when the cap (or a writer too far behind) stopped it:
        # nothing after it is stored, so the file is always the body's first bytes (never a
        # later small chunk after a gap).
        self.truncated_at: int | None = None
        self.truncated_reason = TRUNCATED_REASON

    @property
    def truncated(self) -> bool:
        return self.truncated_at is not None

    @property
    def stem(self) -> str:
        return stem_of(self.started_at, self.request_id)

    def chunk(self, data: bytes, now: float) -> None:
        if len(self.index) < MAX_INDEX_ENTRIES:
            self.index.append((self.offset, len(data), round((now - self.start) * 1000, 3)))
        self.offset += len(data)
        if self.truncated_at is not None:
            return
        if self.size + len(data) > self.settings.max_bytes:
            self.truncated_at = self.size
            return
        if self.file is None:
            self.parts.append(data)
        elif not self.file.send(data, len(data)):
            self.truncated_at, self.truncated_reason = self.size, WRITER_BEHIND_REASON
            return
        self.size += len(data)

    def head(self, meta: dict[str, Any], body_file: str, deferred: str | None) -> dict[str, Any]:
        """The sidecar while the body streams: the request and the response's head, marked
        `complete: false` (replaced by `sidecar` at the end)."""
        return {
            "format": "sseproxy-capture",
            "version": FORMAT_VERSION,
            "request_id": self.request_id,
            "started_at": self.started_at,
            "complete": False,
            **meta,
            "body_file": body_file,
            **({"body_deferred": deferred} if deferred else {}),
            "chunks": [],
        }

    def sidecar(
        self, meta: dict[str, Any], body_file: str, withheld: str | None = None
    ) -> dict[str, Any]:
        return {
            "format": "sseproxy-capture",
            "version": FORMAT_VERSION,
            "request_id": self.request_id,
            "started_at": self.started_at,
            "complete": True,
            **meta,
            "body_file": body_file,
            "body_bytes": 0 if withheld else self.size,
            "truncated": self.truncated,
            **(
                {"truncated_at": self.truncated_at, "truncated_reason": self.truncated_reason}
                if self.truncated_at is not None
                else {}
            ),
            **({"body_withheld": withheld} if withheld else {}),
            "chunks": self.index,
        }


class BodyFile(Spool[bytes]):
    """A capture's body file while it streams; written on the store's writer thread only.
    Identity bodies are masked as they come (`StreamMask`). A compressed body that must be
    searched for credentials goes to an unnamed temporary file (the kernel frees it if the
    proxy is killed: nothing unmasked stays on disk) and into the body file at the end, if it
    holds none."""

    def __init__(self, writer: Writer, path: Path, secrets: Secrets, encoding: Any) -> None:
        super().__init__(writer)
        self.path = path
        self.mask = StreamMask(secrets, encoding if isinstance(encoding, str) else None)
        self._aside: IO[bytes] | None = None
        self._created = False

    @property
    def deferred(self) -> str | None:
        """Why the body file stays empty until the stream ends, if it does."""
        mask = self.mask
        if not mask.deferred:
            return None
        if mask.withheld:
            return f"withheld: {mask.withheld}"
        return f"{mask.encoding} body: searched for credentials decoded, written at its end"

    def create(self) -> None:
        if self._created:
            return
        self._created = True
        self.path.write_bytes(b"")
        if self.mask.deferred and self.mask.withheld is None:
            # open until `finish` (or `_discard`): it outlives any one block
            self._aside = tempfile.TemporaryFile(dir=self.path.parent)  # noqa: SIM115

    def write(self, items: list[bytes]) -> None:
        self.create()
        data = items[0] if len(items) == 1 else b"".join(items)
        mask = self.mask
        if not mask.deferred:
            self._append(mask.feed(data))
            return
        if self._aside is not None:
            self._aside.write(data)
            mask.search(data)
            if mask.withheld is not None:  # nothing of it will be written: free it now
                self._discard()

    def finish(self, cut: bool) -> str | None:
        """Write what was held; returns why the body is withheld, if it is."""
        self.flush()
        self.create()
        mask = self.mask
        if self.failed:  # the file is as far as it got: nothing more is tried
            self._discard()
            return None
        if not mask.deferred:
            self._append(mask.end(cut=cut))
            return None
        aside = self._aside
        if aside is not None and mask.withheld is None:
            aside.seek(0)
            with self.path.open("ab") as out:
                shutil.copyfileobj(aside, out)
        self._discard()
        return mask.withheld

    def _append(self, data: bytes) -> None:
        if data:
            with self.path.open("ab") as out:
                out.write(data)

    def _discard(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None


class CaptureStore:
    def __init__(self, settings: CaptureSettings) -> None:
        """Raises OSError when the directory cannot be created or written to."""
        self.settings = settings
        settings.directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=settings.directory):
            pass  # a directory we cannot write to fails now, not at the first capture
        # every file of the store is written on its thread, in order
        self.writer = Writer(on_error=self._failed)
        self._loop: asyncio.AbstractEventLoop | None = None  # where failures are logged
        self._trim = threading.Lock()  # the directory is trimmed one caller at a time
        # request or session id -> (stem, the second file's suffix: the body, or the messages)
        self._saved: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._streaming: set[str] = set()  # stems still being written: never trimmed

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

    def new(
        self,
        request_id: str,
        start: float,
        head: dict[str, Any] | None = None,
        secrets: Secrets = NO_SECRETS,
    ) -> Capture:
        """A request's capture. With `head` (what the sidecar says from the start), its files
        are created now and its body appended as it comes; without, it is kept in memory and
        written whole by `save`."""
        if head is None:
            return Capture(self.settings, request_id, start)
        self._note_loop()
        capture = Capture(self.settings, request_id, start)
        self._streaming.add(capture.stem)  # set operations: atomic across the two threads
        path = self.settings.directory / f"{capture.stem}.body"
        file = BodyFile(self.writer, path, secrets, head.get("content_encoding"))
        capture.file = file
        self.writer.submit(lambda: self._begin(capture, file, head, secrets))
        return capture

    def request_body(self, body: bytes) -> str | None:
        return base64.b64encode(body).decode() if self.settings.request_bodies else None

    def session(
        self,
        session_id: str,
        start: float,
        head: dict[str, Any] | None = None,
        secrets: Secrets = NO_SECRETS,
    ) -> SessionCapture:
        """A WebSocket session's capture, streamed from the start with `head` as `new`'s."""

        capture = SessionCapture(self.settings, session_id, start)
        if head is None:
            return capture
        self._note_loop()
        self._streaming.add(capture.stem)
        path = self.settings.directory / f"{capture.stem}{MESSAGES_SUFFIX}"
        file = MessagesFile(self.writer, path, secrets)
        capture.file = file
        self.writer.submit(lambda: self._begin_session(capture, file, head, secrets))
        return capture

    def save(self, capture: Capture, meta: dict[str, Any], secrets: Secrets) -> None:
        """Complete the capture on the writer thread: disk latency never touches the event
        loop. Everything written goes through `secrets`, whether or not `meta` was redacted
        already."""
        self.writer.submit(lambda: self._write(capture, meta, secrets))

    def save_session(self, capture: SessionCapture, meta: dict[str, Any], secrets: Secrets) -> None:
        """A WebSocket session's capture, completed as `save` completes a request's."""
        self.writer.submit(lambda: self._write_session(capture, meta, secrets))

    async def drain(self) -> None:
        """Until every write asked for so far is done."""
        await self.writer.drain()

    def _note_loop(self) -> None:
        with contextlib.suppress(RuntimeError):  # none running: failures are logged in place
            self._loop = asyncio.get_running_loop()

    def _failed(self, exc: Exception) -> None:
        """A write failed (on the writer thread): logged on the event loop, as every record
        is, when there is one."""
        error = repr(exc)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: logged here instead
                loop.call_soon_threadsafe(_log_failure, error)
                return
        _log_failure(error)

    def _begin(
        self, capture: Capture, file: BodyFile, head: dict[str, Any], secrets: Secrets
    ) -> None:
        stem = capture.stem
        try:
            file.create()
        except Exception:
            file.failed = True  # no write of this capture is tried again (one warning)
            raise
        meta = _prepared(head, secrets)
        write_sidecar(
            self.settings.directory, stem, capture.head(meta, file.path.name, file.deferred)
        )
        self._remember(capture.request_id, stem, ".body", trim=False)

    def _write(self, capture: Capture, meta: dict[str, Any], secrets: Secrets) -> None:
        stem = capture.stem
        file = capture.file
        try:
            if file is None:  # kept in memory: the whole body, as one piece
                directory = self.settings.directory
                file = BodyFile(
                    self.writer, directory / f"{stem}.body", secrets, meta.get("content_encoding")
                )
                file.create()
                file.write([b"".join(capture.parts)])
            withheld = file.finish(capture.truncated)
            sidecar = capture.sidecar(_prepared(meta, secrets), file.path.name, withheld)
            write_sidecar(self.settings.directory, stem, sidecar)
        finally:
            self._streaming.discard(stem)
        self._remember(capture.request_id, stem, ".body")

    def _begin_session(
        self, capture: SessionCapture, file: MessagesFile, head: dict[str, Any], secrets: Secrets
    ) -> None:

        stem = capture.stem
        try:
            file.create()
        except Exception:
            file.failed = True
            raise
        write_sidecar(self.settings.directory, stem, session_head(capture, head, secrets))
        self._remember(capture.session_id, stem, MESSAGES_SUFFIX, trim=False)

    def _remember(self, key: str, stem: str, suffix: str, trim: bool = True) -> None:
        """Name the capture's files for the inspector (from its start: a live stream's are
        there to download); `trim`: at its end, when its files have their size."""
        with self._trim:
            self._saved[key] = (stem, suffix)
            while len(self._saved) > MAX_SAVED_NAMES:
                self._saved.popitem(last=False)
            if trim:
                self._enforce_total()

    def _write_session(
        self, capture: SessionCapture, meta: dict[str, Any], secrets: Secrets
    ) -> None:

        try:
            stem = write_session(self.settings.directory, capture, meta, secrets)
        finally:
            self._streaming.discard(capture.stem)
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
        """Delete the oldest captures until the directory is under its cap (never the files
        of a capture still being written)."""
        files = []
        streaming = self._streaming
        with os.scandir(self.settings.directory) as entries:
            for entry in entries:
                if entry.name.endswith((".body", ".json", ".jsonl")) and not (
                    streaming and entry.name.split(".", 1)[0] in streaming
                ):
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


def _log_failure(error: str) -> None:
    logger.warning("capture.failed", error=error)


def masked_body(
    capture: Capture, encoding: str | None, secrets: Secrets
) -> tuple[bytes, str | None]:
    """The body kept in memory as it is written, and why it is withheld if it is: masked as
    `BodyFile` masks a streamed one (a compressed body searched decoded, and withheld when it
    holds a credential or cannot be searched)."""
    body = b"".join(capture.parts)
    mask = StreamMask(secrets, encoding)
    if not mask.deferred:
        return mask.feed(body) + mask.end(cut=capture.truncated), None
    mask.search(body)
    return (b"", mask.withheld) if mask.withheld else (body, None)


def _prepared(meta: dict[str, Any], secrets: Secrets) -> dict[str, Any]:
    """`meta` as a sidecar keeps it: the request body (when kept) masked, the rest redacted."""
    request_body = meta.get("request_body_base64")
    if isinstance(request_body, str):
        masked = secrets.mask(base64.b64decode(request_body))
        meta = {**meta, "request_body_base64": base64.b64encode(masked).decode()}
    redacted: dict[str, Any] = secrets.redact(meta)
    return redacted
