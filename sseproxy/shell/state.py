"""What one request and the whole proxy hold: values and limits. Every shell module imports
this one and it imports none of them (only the inspector's view types, a leaf), so that the
shell's modules form no import cycle."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from sseproxy.capture.store import Capture, CaptureStore
from sseproxy.config import Route, Settings
from sseproxy.core import EndReason, ErrorInfo, StreamTap
from sseproxy.core.inject import Rule
from sseproxy.core.pacing import ChunkTimes, Pacing
from sseproxy.core.request import RequestFacts as CoreRequestFacts
from sseproxy.core.sessions.reconnect import ReconnectWatch
from sseproxy.inspector.endpoints import Inspector, StreamView
from sseproxy.observe.metrics import Metrics
from sseproxy.observe.redact import Secrets
from sseproxy.shell.budget import HeldBytes
from sseproxy.shell.delivery import ClientDelivery
from sseproxy.shell.memory import MemoryReturn, malloc_trim
from sseproxy.shell.pacing import LoopTurns
from sseproxy.shell.turns import AnalysisTurns
from sseproxy.shell.upstream import UpstreamPool

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from sseproxy.observe.tracing import Tracing
# What a request asked for before its body was read (frozen: one for all).
NOTHING_ASKED = CoreRequestFacts()


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the client asked for, fixed once the request has been admitted."""

    request_id: str
    method: str
    path: str  # the raw target as sent, its credentials redacted
    started_at: float  # wall clock, for people
    start: float  # monotonic, for durations
    route: Route | None = None
    body: bytes = b""
    inject_rules: tuple[Rule, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)  # as received (read-only)
    secrets: Secrets = field(default_factory=lambda: Secrets.from_request({}, "/", b""))
    asked: CoreRequestFacts = NOTHING_ASKED  # for the core's checks

    def routed(self, route: Route) -> RequestFacts:
        """These facts with their route (`dataclasses.replace`, built directly: per request)."""
        return RequestFacts(
            self.request_id,
            self.method,
            self.path,
            self.started_at,
            self.start,
            route,
            self.body,
            self.inject_rules,
            self.headers,
            self.secrets,
            self.asked,
        )

    def admitted(
        self,
        body: bytes,
        asked: CoreRequestFacts,
        inject_rules: tuple[Rule, ...],
        secrets: Secrets,
    ) -> RequestFacts:
        """These facts with what the body and the drill header say."""
        return RequestFacts(
            self.request_id,
            self.method,
            self.path,
            self.started_at,
            self.start,
            self.route,
            body,
            inject_rules,
            self.headers,
            secrets,
            asked,
        )


@dataclass
class Timings:
    """Clock readings of one request; the core never reads the clock, the shell does."""

    start: float
    headers: float | None = None
    last_chunk: float | None = None
    max_gap: float = 0.0
    first_content: float | None = None
    last_content: float | None = None
    max_content_gap: float = 0.0
    # The first chunk that carried an event of the response (any kind: role, reasoning, tool
    # call, text; not a keep-alive comment): the GenAI conventions' "first chunk".
    first_chunk: float | None = None
    last_output: float | None = None  # when the last content chunk arrived (upstream clock)
    chunk_times: ChunkTimes | None = None  # between content chunks, once there are two

    def chunk(self, arrived: float, now: float, content_deltas: int, events: int = 0) -> None:
        """A chunk that `arrived` from upstream reached the client at `now`; `events`: the
        events the stream has carried so far (the tap's count).

        The gap is the upstream's silence (arrival minus the previous chunk's delivery), so a
        client that reads slowly shows in `client_wait_ms`, not in `max_gap_ms`.
        """
        last = self.last_chunk or self.headers or self.start
        if arrived - last > self.max_gap:
            self.max_gap = arrived - last
        self.last_chunk = now
        if self.first_chunk is None and (events or content_deltas):
            self.first_chunk = arrived
        if content_deltas:
            if self.first_content is None:
                # time to first content (`ttft_ms`) is the upstream's, as the pacing's clock:
                # when the chunk arrived, not when the client took it
                self.first_content = arrived
            elif self.last_content is not None:
                self.max_content_gap = max(self.max_content_gap, now - self.last_content)
            self.last_content = now
            if self.last_output is not None:
                if self.chunk_times is None:
                    self.chunk_times = ChunkTimes()
                self.chunk_times.add(arrived - self.last_output)
            self.last_output = arrived

    def resumed(self, now: float) -> None:
        """The upstream was paused for a client that did not read, until `now`: the next
        gap starts here, so max_gap_ms keeps measuring the upstream's silence."""
        if self.last_chunk is not None and now > self.last_chunk:
            self.last_chunk = now

    def fields(self, end: float) -> dict[str, float | None]:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.start) * 1000, 3)

        # Silence up to the end counts too: it is the gap a timeout or a cut ends.
        content_gap = self.max_content_gap
        if self.last_content is not None:
            content_gap = max(content_gap, end - self.last_content)
        last_byte = self.last_chunk or self.headers
        max_gap = self.max_gap if last_byte is None else max(self.max_gap, end - last_byte)
        return {
            "ttfb_ms": ms(self.headers),
            "ttft_ms": ms(self.first_content),
            "first_chunk_ms": ms(self.first_chunk),
            "duration_ms": round((end - self.start) * 1000, 3),
            "max_gap_ms": None if last_byte is None else round(max_gap * 1000, 3),
            "content_gap_ms": round(content_gap * 1000, 3) if self.first_content else None,
        }


class Answerer(StrEnum):
    """Who made the response the client was sent (the record's `answered_by`)."""

    PROXY = "proxy"  # the proxy's own answer: a refusal, or its 502/504 for an upstream failure
    UPSTREAM = "upstream"  # the upstream's status and headers, relayed


@dataclass
class Progress:
    """What happened so far; the shell's only mutable per-request state."""

    timings: Timings
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None
    upstream_request_id: str | None = None
    stream: bool = False
    tap: StreamTap | None = None
    view: StreamView | None = None
    capture: Capture | None = None
    span: Span | None = None
    delivery: ClientDelivery | None = None
    pacing: Pacing | None = None
    end: EndReason | str = EndReason.END_OF_INPUT
    # The upstream body ended by its framing (True), was cut (False), or nobody knows: the
    # client left and the proxy stopped reading (None).
    http_complete: bool | None = False
    # Every byte of the response reached the client's connection: its close is no leaving.
    delivered: bool = False
    upstream_ended: bool = False  # the upstream body's framing had completed, all of it read
    bytes_after_end: int = 0  # stray bytes after the upstream response's end (the leg's count)
    # The trailer fields the client's head announced (`Trailer`): its response ends with them.
    trailer_names: tuple[str, ...] = ()
    trailers: tuple[tuple[bytes, bytes], ...] = ()  # the upstream's, as parsed: recorded
    # The record's `client` and `run_id` (`observe.clients.client_fields` of the request's
    # headers), once the inspector's row took them: worked out once per request.
    client: Mapping[str, Any] | None = None
    trailers_forwarded: tuple[str, ...] = ()  # the names the client's trailer section carried
    proxy_error: ErrorInfo | None = None
    # A WebSocket session took over: it writes its own records (one per turn, the session's).
    upgraded: bool = False
    answered_by: Answerer | None = None  # None: no response was sent

    def client_left(self, upstream_ended: bool) -> None:
        """The client went before the last byte: `http_complete` says what the proxy knows of
        the upstream body, never `false` (the client saw no broken transfer)."""
        self.upstream_ended = upstream_ended
        self.end = EndReason.CLIENT_DISCONNECTED
        self.http_complete = True if upstream_ended else None

    def cancelled_at(self, upstream_ended: bool, received_all: bool) -> None:
        """The handler is being cancelled mid-relay: note how far the response had got, for
        `cancelled` to decide once the cause is known."""
        self.upstream_ended = upstream_ended
        if received_all and upstream_ended:
            self.end, self.http_complete, self.delivered = EndReason.UPSTREAM_CLOSED, True, True

    def cancelled(self, shutdown: bool) -> None:
        """The handler was cancelled: the client left, or the proxy shuts down (its own cut).
        A client that had received every byte did not leave early; nothing changes then."""
        if self.delivered:
            return
        if shutdown:
            self.end, self.http_complete = EndReason.PROXY_SHUTDOWN, False
        else:
            self.client_left(self.upstream_ended)


class OpenSession(Protocol):
    """An open WebSocket session as the proxy's stop sees it (websocket.Leaving)."""

    task: asyncio.Task[Any] | None  # its handler

    def go_away(self, now: bool) -> None: ...


@dataclass
class ProxyState:
    metrics: Metrics
    inspector: Inspector
    captures: CaptureStore | None = None
    tracing: Tracing | None = None
    started: float = field(default_factory=time.monotonic)
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    active: int = 0  # stream slots taken
    body_bytes: int = 0  # request body bytes held by requests in flight
    shutting_down: bool = False
    pool: UpstreamPool | None = None
    # Response bytes held for clients, against max_held_bytes.
    held: HeldBytes = field(default_factory=lambda: HeldBytes(Settings().max_held_bytes))
    # Upstream messages queued by WebSocket sessions for their clients, against
    # max_ws_held_bytes.
    ws_held: HeldBytes = field(default_factory=lambda: HeldBytes(Settings().max_ws_held_bytes))
    # The analysis each loop turn may do across all streams (turns.py).
    analysis: AnalysisTurns = field(default_factory=AnalysisTurns)
    # The bulk work each loop iteration may start (admissions, relayed reads, records;
    # pacing.py).
    steps: LoopTurns = field(default_factory=LoopTurns)
    failed_sinks: set[str] = field(default_factory=set)
    reconnects: ReconnectWatch = field(default_factory=ReconnectWatch)
    sessions: dict[str, OpenSession] = field(default_factory=dict)  # WebSocket, by id
    # Cycles collected and heaps trimmed once sessions ended (memory.py).
    memory: MemoryReturn = field(default_factory=lambda: MemoryReturn(malloc_trim()))


class _Random:
    """Random bytes for request ids, fetched for many ids at once: one system call per
    IDS_PER_FETCH requests instead of one per request. A forked child drops what it inherited,
    so that no two processes hand out the same ids."""

    pool = b""
    used = 0


IDS_PER_FETCH = 64


def _fork_reset() -> None:
    _Random.pool, _Random.used = b"", 0


os.register_at_fork(after_in_child=_fork_reset)


def new_request_id() -> str:
    """A random UUID, version 4, as `uuid.uuid4().hex` writes it."""
    if _Random.used >= len(_Random.pool):
        _Random.pool, _Random.used = os.urandom(16 * IDS_PER_FETCH), 0
    start = _Random.used
    _Random.used = start + 16
    raw = bytearray(_Random.pool[start : start + 16])
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


class Exchange:
    """One proxied request: immutable facts, a small mutable progress, the resources it holds."""

    __slots__ = ("body_bytes", "facts", "progress", "slot")

    def __init__(self, request: web.Request) -> None:
        start = time.monotonic()
        # Rebuilt with the body once it is read; every sink gets what these redact.
        secrets, path = Secrets.of_request(request.headers, request.raw_path)
        self.facts = RequestFacts(
            request_id=new_request_id(),
            method=request.method,
            path=path,
            started_at=time.time(),
            start=start,
            headers=request.headers,
            secrets=secrets,
        )
        self.progress = Progress(Timings(start))
        self.slot = False
        self.body_bytes = 0
