"""Capture of WebSocket sessions: a JSON Lines messages file (one line per message: direction,
time, kind, the data, a close's code and reason) beside a JSON sidecar (the handshake, the
`session.finished` record, the turn records), so a session can be replayed
(`sseproxy replay X.json`) or served again (`sseproxy mock`).

Same directory, naming and bounds as HTTP captures (`capture.py`), and written as they are:
the sidecar at the start (`complete: false`, the handshake), each message appended to the
messages file as it is relayed (the relay only queues it: masking, encoding and writing happen
on the store's writer thread), the sidecar replaced at the end. Client messages hold prompts:
their data is kept only with `capture_request_bodies`, otherwise their kind, size, time and
name (`type`, or first key). Audio is counted, never kept: a message's base64 audio is
replaced by "" and its decoded size listed in `audio_bytes`."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from sseproxy.capture.format import (
    FORMAT_VERSION,
    TRUNCATED_REASON,
    WRITER_BEHIND_REASON,
    CaptureSettings,
    stem_of,
    unfinished,
    write_sidecar,
)
from sseproxy.capture.writer import Spool, Writer
from sseproxy.core.dialects.base import dig
from sseproxy.core.sessions.base import audio_bytes
from sseproxy.observe.redact import Secrets

# What the sidecar says its messages file is, and how the file is named beside it.
TRANSPORT = "websocket"
MESSAGES_SUFFIX = ".messages.jsonl"
# Bytes a line costs against `max_bytes` beyond its data: a flood of empty messages is bounded.
LINE_OVERHEAD = 64
# Turn records a sidecar keeps (the first ones); past it they are counted only.
MAX_TURN_RECORDS = 10_000
# A client message's name as kept (a peer's string: bounded).
MAX_NAME_CHARS = 100
# Messages that may carry base64 audio: looked for before parsing (most messages do not).
AUDIO_MARKS = (
    b'audio.delta"',
    b'"inlineData"',
    b'"input_audio_buffer.append"',
    b'"audio"',
    b'"mediaChunks"',
)
REALTIME_AUDIO = frozenset(
    {"response.output_audio.delta", "response.audio.delta", "input_audio_buffer.append"}
)


class Direction(StrEnum):
    CLIENT = "client"
    UPSTREAM = "upstream"


class Kind(StrEnum):
    TEXT = "text"
    BINARY = "binary"
    PING = "ping"
    PONG = "pong"
    CLOSE = "close"


DATA_KINDS = frozenset({Kind.TEXT, Kind.BINARY})


@dataclass(frozen=True, slots=True)
class Line:
    """One message as captured (its data masked and encoded only when written)."""

    t_ms: float
    direction: Direction
    kind: Kind
    size: int
    data: bytes | None
    name: str | None = None
    code: int | None = None
    reason: str | None = None
    audio_bytes: tuple[int, ...] = ()


def _audio_slots(obj: Any) -> list[tuple[dict[str, Any], str]]:
    """Where base64 audio sits in a message: Realtime's `delta` / `audio`, Gemini Live's
    `inlineData.data` (server parts) and `realtimeInput` chunks (client)."""
    if not isinstance(obj, dict):
        return []
    kind = obj.get("type")
    if kind in REALTIME_AUDIO:
        key = "audio" if kind == "input_audio_buffer.append" else "delta"
        return [(obj, key)] if isinstance(obj.get(key), str) else []
    slots: list[tuple[dict[str, Any], str]] = []
    turn = dig(obj, "serverContent", "modelTurn")
    parts = turn.get("parts") if isinstance(turn, dict) else None
    for part in parts if isinstance(parts, list) else []:
        inline = part.get("inlineData") if isinstance(part, dict) else None
        if isinstance(inline, dict) and isinstance(inline.get("data"), str):
            slots.append((inline, "data"))
    realtime = obj.get("realtimeInput")
    if isinstance(realtime, dict):
        chunks = realtime.get("mediaChunks")
        for media in [realtime.get("audio"), *(chunks if isinstance(chunks, list) else [])]:
            if isinstance(media, dict) and isinstance(media.get("data"), str):
                slots.append((media, "data"))
    return slots


def without_audio(data: bytes) -> tuple[bytes, tuple[int, ...]]:
    """`data` with its base64 audio replaced by "", and the decoded size of each one
    removed; `data` itself when it holds none."""
    if not any(mark in data for mark in AUDIO_MARKS):
        return data, ()
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data, ()
    slots = _audio_slots(obj)
    if not slots:
        return data, ()
    sizes = []
    for holder, key in slots:
        sizes.append(audio_bytes(holder[key]))
        holder[key] = ""
    return orjson.dumps(obj), tuple(sizes)


def with_audio(obj: Any, sizes: list[int]) -> Any:
    """A captured message with placeholder base64 of the recorded sizes put back, so a replay
    counts the audio the session had (`without_audio`'s inverse, but for the samples)."""
    for (holder, key), size in zip(_audio_slots(obj), sizes, strict=False):
        holder[key] = base64.b64encode(bytes(size)).decode()
    return obj


class SessionCapture:
    """One session's capture as the event loop sees it: each kept message sent to its
    `MessagesFile` as it is relayed (or, with no file, kept in `lines` and written whole at
    the end). Bounded by `max_bytes`."""

    def __init__(
        self,
        settings: CaptureSettings,
        session_id: str,
        start: float,
        file: MessagesFile | None = None,
    ) -> None:
        self.settings = settings
        self.session_id = session_id
        self.start = start
        self.started_at = time.time()
        self.file = file
        self.lines: list[Line] = []
        self.count = 0  # messages kept
        self.kept = 0
        self.seen = 0  # messages seen, kept or not
        # The index of the first message the cap (or a writer too far behind) stopped: nothing
        # after it is kept, so the file is always the session's first messages.
        self.truncated_at: int | None = None
        self.truncated_reason = TRUNCATED_REASON
        self.turns: list[dict[str, Any]] = []
        self.turns_dropped = 0

    @property
    def stem(self) -> str:
        return stem_of(self.started_at, self.session_id)

    def message(
        self,
        direction: Direction,
        kind: Kind,
        data: bytes,
        now: float,
        name: str | None = None,
        code: int | None = None,
        reason: str | None = None,
    ) -> None:
        index, self.seen = self.seen, self.seen + 1
        if self.truncated_at is not None:
            return
        kept: bytes | None = None if kind is Kind.CLOSE else data  # a close: code and reason
        audio: tuple[int, ...] = ()
        if kind in DATA_KINDS:
            if direction is Direction.CLIENT and not self.settings.request_bodies:
                kept = None
            else:
                kept, audio = without_audio(data)
        cost = LINE_OVERHEAD + len(kept or b"") + len(reason or "")
        if self.kept + cost > self.settings.max_bytes:
            self.truncated_at = index
            return
        t_ms = round((now - self.start) * 1000, 3)
        name = name[:MAX_NAME_CHARS] if name else None
        line = Line(t_ms, direction, kind, len(data), kept, name, code, reason, audio)
        if self.file is None:
            self.lines.append(line)
        elif not self.file.send(line, cost):
            self.truncated_at, self.truncated_reason = index, WRITER_BEHIND_REASON
            return
        self.kept += cost
        self.count += 1

    def turn(self, record: dict[str, Any]) -> None:
        if len(self.turns) < MAX_TURN_RECORDS:
            self.turns.append(record)
        else:
            self.turns_dropped += 1


class MessagesFile(Spool[Line]):
    """A session's messages file while it runs; written on the store's writer thread only,
    each message masked whole (a message is never split across lines)."""

    def __init__(self, writer: Writer, path: Path, secrets: Secrets) -> None:
        super().__init__(writer)
        self.path = path
        self.secrets = secrets
        self._created = False

    def create(self) -> None:
        if not self._created:
            self._created = True
            self.path.write_bytes(b"")

    def write(self, items: list[Line]) -> None:
        self.create()
        text = b"".join(line_json(line, self.secrets) for line in items)
        with self.path.open("ab") as out:
            out.write(text)


def line_json(line: Line, secrets: Secrets) -> bytes:
    """One line of the messages file: credentials masked, data as text when it is UTF-8."""
    out: dict[str, Any] = {
        "t_ms": line.t_ms,
        "dir": str(line.direction),
        "kind": str(line.kind),
        "size": line.size,
    }
    if line.name is not None:
        out["name"] = secrets.mask_values(line.name)
    if line.data is not None:
        data = secrets.mask(line.data)
        try:
            out["data"] = data.decode("utf-8")
        except UnicodeDecodeError:
            out["data"], out["encoding"] = base64.b64encode(data).decode(), "base64"
    elif line.kind in DATA_KINDS:
        out["data_omitted"] = "client messages are kept with capture_request_bodies"
    if line.audio_bytes:
        out["audio_bytes"] = list(line.audio_bytes)
    if line.kind is Kind.CLOSE:
        out["code"] = line.code
        out["reason"] = secrets.mask_values(line.reason or "")
    return orjson.dumps(out) + b"\n"


def session_head(capture: SessionCapture, meta: dict[str, Any], secrets: Secrets) -> dict[str, Any]:
    """The sidecar while the session runs: the handshake, marked `complete: false` (replaced
    at the end by `write_session`'s)."""
    return {
        "format": "sseproxy-capture",
        "version": FORMAT_VERSION,
        "transport": TRANSPORT,
        "session_id": capture.session_id,
        "started_at": capture.started_at,
        "complete": False,
        **secrets.redact(meta),
        "messages_file": capture.stem + MESSAGES_SUFFIX,
    }


def write_session(
    directory: Path, capture: SessionCapture, meta: dict[str, Any], secrets: Secrets
) -> str:
    """Complete the messages file (all of it, for a capture kept in memory), then write the
    sidecar (renamed into place: readers never see half of one); returns the files' stem."""
    stem = capture.stem
    messages = stem + MESSAGES_SUFFIX
    if capture.file is None:
        text = b"".join(line_json(line, secrets) for line in capture.lines)
        (directory / messages).write_bytes(text)
    else:
        capture.file.flush()
        capture.file.create()
    sidecar: dict[str, Any] = {
        "format": "sseproxy-capture",
        "version": FORMAT_VERSION,
        "transport": TRANSPORT,
        "session_id": capture.session_id,
        "started_at": capture.started_at,
        "complete": True,
        **secrets.redact(meta),
        "messages_file": messages,
        "messages": capture.count,
        "messages_seen": capture.seen,
        "truncated": capture.truncated_at is not None,
        **(
            {"truncated_at": capture.truncated_at, "truncated_reason": capture.truncated_reason}
            if capture.truncated_at is not None
            else {}
        ),
        "turn_records": secrets.redact(capture.turns),
        "turn_records_dropped": capture.turns_dropped,
    }
    write_sidecar(directory, stem, sidecar)
    return stem


@dataclass(frozen=True, slots=True)
class SessionFile:
    """A session capture as read back: its sidecar and its messages, in order."""

    sidecar: dict[str, Any]
    lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def session(self) -> dict[str, Any]:
        """The `session.finished` record it holds."""
        record = self.sidecar.get("session")
        return record if isinstance(record, dict) else {}


def is_session(sidecar: dict[str, Any]) -> bool:
    return sidecar.get("format") == "sseproxy-capture" and sidecar.get("transport") == TRANSPORT


def is_session_capture(path: Path) -> bool:
    """Whether `path` is a session capture's sidecar (False when it cannot be read as JSON:
    the caller's own reading says why)."""
    try:
        sidecar = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(sidecar, dict) and is_session(sidecar)


def load_session(path: Path) -> SessionFile:
    """The sidecar and its messages; raises ValueError when it is not a session capture."""
    sidecar = orjson.loads(path.read_bytes())
    if not isinstance(sidecar, dict) or not is_session(sidecar):
        raise ValueError(f"{path} is not an sseproxy session capture")
    text = (path.parent / str(sidecar["messages_file"])).read_bytes()
    rows = text.splitlines()
    if unfinished(sidecar) and rows and not text.endswith(b"\n"):
        rows.pop()  # the proxy stopped while writing it: a line is whole once it ends
    lines = [orjson.loads(line) for line in rows if line.strip()]
    if not all(isinstance(line, dict) for line in lines):
        raise ValueError(f"{path}: a line of its messages file is not an object")
    return SessionFile(sidecar, lines)


def line_data(line: dict[str, Any]) -> bytes | None:
    """A captured message's bytes as the file holds them (None when they were not kept)."""
    data = line.get("data")
    if not isinstance(data, str):
        return None
    if line.get("encoding") == "base64":
        return base64.b64decode(data)
    return data.encode("utf-8")
