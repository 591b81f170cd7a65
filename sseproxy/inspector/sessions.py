"""The inspector's view of one WebSocket session: its row in the list (live while it runs) and
its detail (the handshake, the messages both ways in time order, the close, the record).

While the session runs the relay appends one small entry per message (time, direction, kind,
size, name, turn and, with keep_content, a text message's first bytes); the row reads the
session's own counters. Everything else is built when a page asks for the detail.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from sseproxy.capture.sessions import REALTIME_AUDIO, Kind
from sseproxy.observe.redact import NO_SECRETS, Secrets

# Message names whose payload is audio (base64): never kept, shown as their size. Gemini
# Live's `realtimeInput` carries the client's audio and video chunks.
AUDIO_NAMES = REALTIME_AUDIO | {"realtimeInput"}
# Gemini Live's model audio rides in `serverContent` as inline data.
INLINE_DATA = b'"inlineData"'
# Turn ids a session row remembers (its turn rows are in the streams' ring, which is smaller).
TURN_IDS = 200


@dataclass(frozen=True, slots=True)
class SessionRetention:
    """How much of the sessions the inspector keeps (`inspector_session*` settings)."""

    sessions: int = 50  # sessions in the list; older ones drop out, with their turn rows
    messages: int = 2000  # message entries per session; beyond, the rest are counted
    chars: int = 8192  # characters of one message's data shown (inspector_chars)


class Entry(NamedTuple):
    """One message as the relay saw it; `data` only with keep_content, for text, not audio."""

    t: float
    direction: str
    kind: str
    size: int
    name: str | None
    turn: int | None
    data: bytes | None
    audio: bool  # an audio message: its data is never kept, only its size


class Budget(Protocol):
    """The bytes all the inspector's views hold together (shell.inspector.ByteBudget)."""

    used: int

    @property
    def room(self) -> int: ...

    def give(self, size: int) -> None: ...


class LiveSession(Protocol):
    """What the row reads from the running session (websocket.Session): its own counters."""

    messages: Counter[str]
    sizes: Counter[str]

    @property
    def turns(self) -> int: ...


@dataclass
class SessionView:
    session_id: str
    path: str
    started_at: float
    start: float  # monotonic, at the 101: the messages' times count from here
    route: str | None = None
    dialect: str | None = None
    subprotocol: str | None = None
    extensions: dict[str, list[str]] = field(default_factory=dict)
    request_headers: dict[str, str] = field(default_factory=dict)
    response_headers: dict[str, str] = field(default_factory=dict)
    secrets: Secrets = NO_SECRETS
    live: LiveSession | None = None
    retention: SessionRetention = SessionRetention()
    budget: Budget | None = None  # with keep_content: the inspector's, shared by all views
    entries: list[Entry] = field(default_factory=list)
    omitted: int = 0  # messages beyond retention.messages, counted only
    unkept: int = 0  # text messages whose data did not fit the byte budget
    kept_bytes: int = 0
    gone: bool = False  # it kept data; it was let go (the ring moved on)
    turn_ids: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=TURN_IDS))
    last_state: str | None = None
    model: str | None = None
    record: dict[str, Any] | None = None
    run_id: str | None = None  # the agent run it belongs to: its row goes under the run's
    client: str | None = None  # "name version", as the record's `client`

    @property
    def request_id(self) -> str:
        """The feed's key for this row (a session's id is a request id)."""
        return self.session_id

    def message(
        self,
        now: float,
        direction: str,
        kind: str,
        size: int,
        name: str | None,
        turn: int | None,
        data: bytes | None = None,
    ) -> None:
        """The relay passed one message on (the hot path: one bounded append, nothing built)."""
        if len(self.entries) >= self.retention.messages:
            self.omitted += 1
            return
        if kind == Kind.CLOSE and name is not None:
            size += 2  # a close frame's status code, before its reason
        kept, audio, budget = None, False, self.budget
        if budget is not None and data is not None and kind == Kind.TEXT:
            audio = _audio(name, data)
            if not audio:
                kept = data[: min(self.retention.chars, budget.room)]
                if len(kept) < min(len(data), self.retention.chars):
                    self.unkept += 1  # the budget is spent: the size only
                    kept = None
                else:
                    budget.used += len(kept)
                    self.kept_bytes += len(kept)
        self.entries.append(Entry(now, direction, kind, size, name, turn, kept, audio))

    def turn_ended(self, number: int | None, request_id: str, record: dict[str, Any]) -> None:
        if number is not None:
            self.turn_ids.append((number, request_id))
        self.last_state = record.get("state")
        self.model = record.get("model") or record.get("response_model") or self.model

    def finish(self, record: dict[str, Any]) -> None:
        """The `session.finished` record: the row's figures are the record's from now on."""
        self.record = record
        self.live = None

    def let_go(self) -> None:
        """Give the kept data back (the ring moved on); the entries go with it."""
        if self.budget is not None:
            self.budget.give(self.kept_bytes)
            self.budget = None
        if self.kept_bytes:
            self.gone = True
        self.entries = []
        self.kept_bytes = 0

    def row(self) -> dict[str, Any]:
        record = self.record or {}
        live = self.live
        if live is not None:
            messages = {"client": live.messages["client"], "upstream": live.messages["upstream"]}
            sizes = {"client": live.sizes["client"], "upstream": live.sizes["upstream"]}
            turns = live.turns
            duration: float | None = round((time.monotonic() - self.start) * 1000, 1)
        else:
            messages = record.get("messages") or {}
            sizes = record.get("bytes") or {}
            turns = record.get("turns") or len(self.turn_ids)
            duration = record.get("duration_ms")
        return {
            "kind": "session",
            "request_id": self.session_id,
            "session_id": self.session_id,
            "transport": "websocket",
            "method": "GET",
            "path": self.path,
            "started_at": self.started_at,
            "route": self.route,
            "dialect": self.dialect,
            "subprotocol": self.subprotocol,
            "model": self.model,
            "status": 101,
            "state": "open" if self.record is None else "closed",
            "last_state": self.last_state,
            "turns": turns,
            "messages": messages,
            "bytes": sizes,
            "duration_ms": duration,
            "close_code": record.get("close_code"),
            "close_reason": record.get("close_reason"),
            "closed_by": record.get("closed_by"),
            "anomalies": record.get("anomalies") or {},
            "run_id": self.run_id,
            "client": self.client,
        }

    def detail(self, keep_content: bool) -> dict[str, Any]:
        record = self.record or {}
        chars = self.retention.chars
        messages = []
        for e in self.entries:
            item: dict[str, Any] = {
                "t_ms": round((e.t - self.start) * 1000, 3),
                "direction": e.direction,
                "kind": e.kind,
                "size": e.size,
                "type": e.name,
                "turn": e.turn,
            }
            if e.data is not None:
                text = self.secrets.redact_text(e.data.decode("utf-8", "replace"))
                item["data"] = text[:chars]
                item["truncated"] = e.size > len(e.data) or len(text) > chars
            elif e.audio:
                item["audio"] = True
            messages.append(item)
        return {
            **self.row(),
            "handshake": {
                "path": self.path,
                "subprotocol": self.subprotocol,
                "extensions": self.extensions,
                "request_headers": self.request_headers,
                "response_headers": self.response_headers,
            },
            "message_list": messages,
            "messages_omitted": self.omitted,
            "messages_unkept": self.unkept,
            "retained": "gone" if self.gone else ("kept" if keep_content else "off"),
            "close": {
                "code": record.get("close_code"),
                "reason": record.get("close_reason"),
                "closed_by": record.get("closed_by"),
                "close_frame": record.get("close_frame"),
            }
            if self.record is not None
            else None,
            "turn_rows": [{"turn": n, "request_id": rid} for n, rid in self.turn_ids],
            "record": self.record,
        }


def _audio(name: str | None, data: bytes) -> bool:
    """Whether a message carries audio (or video) payloads, which are never kept."""
    if name in AUDIO_NAMES:
        return True
    return name == "serverContent" and INLINE_DATA in data
