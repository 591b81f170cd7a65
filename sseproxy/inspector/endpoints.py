"""The live inspector: active and recent streams for a person looking at a browser.

A bounded ring of stream views, fed by the proxy at a stream's start, on a timer while it
runs, and at its end. Changes are coalesced: at most FLUSHES_PER_SECOND times a second the
changed rows are serialised once, as one batch, and the same bytes go to every viewer, so the
cost of a busy proxy does not multiply by the number of open pages. The page is one
self-contained file (no CDN, no build step) that carries the current rows in its first paint.

With keep_content each view also keeps its stream's first bytes as relayed (bounded by
`Retention`), from which a stream's detail rebuilds its event list and raw view on request.
WebSocket sessions have rows of their own (`inspector_sessions`), their turns under them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from sseproxy.core import StreamTap, TapItem
from sseproxy.inspector.event_list import EventList, raw_view
from sseproxy.inspector.sessions import SessionRetention, SessionView
from sseproxy.observe.clients import client_fields
from sseproxy.observe.redact import NO_SECRETS, Secrets
from sseproxy.shell.admin import NO_FRAMING

if TYPE_CHECKING:
    from sseproxy.capture.store import CaptureStore
# Recent streams kept for the page; older ones drop out of the ring.
RING_SIZE = 200
# Timeline points kept per stream (arrival time, bytes, content?); enough to draw any stream,
# bounded for very long ones.
TIMELINE_POINTS = 4000
# Spans when writes to the client waited (back-pressure) kept per stream.
# Waits closer than this are one span on the timeline (the writes between them took no time).
WAIT_JOIN_S = 0.01
WAIT_SPANS = 1000
# Assembled text shown per stream with --keep-content.
CONTENT_CHARS = 64 * 1024
# A page that falls this many batches behind is disconnected; its EventSource reconnects and
# starts again from a full snapshot, so it never shows a row that silently missed an update.
SUBSCRIBER_QUEUE = 16
# Batches per second to every viewer, at most; progress of running streams (bytes, duration)
# rides along every PROGRESS_EVERY-th batch.
FLUSHES_PER_SECOND = 4
PROGRESS_EVERY = 2
# Open feeds at once; one more gets 503 (each costs a write per batch).
MAX_VIEWERS = 32
# Header values shown per header, at most (a peer sends them).
HEADER_CHARS = 2048
# Headers shown per side, at most.
MAX_HEADERS = 200


@dataclass(frozen=True, slots=True)
class Retention:
    """How much of the streams' bytes the inspector keeps for its event list and raw view
    (`inspector_*` settings). Only with keep_content: the bytes hold the answers."""

    streams: int = 50  # finished streams that keep their bytes; older ones say they are gone
    stream_bytes: int = 1024 * 1024  # the first bytes of each stream, at most
    total_bytes: int = 64 * 1024 * 1024  # all streams together, running ones included
    events: int = 5000  # rows of one stream's event list
    chars: int = 8192  # characters of one event's data (or one raw chunk) shown


@dataclass
class ByteBudget:
    """The bytes all views hold together; what does not fit is not kept."""

    limit: int
    used: int = 0

    @property
    def room(self) -> int:
        return self.limit - self.used

    def give(self, size: int) -> None:
        self.used -= size


class Timeline:
    """A stream's chunks as the page draws them: (monotonic time, bytes, content deltas),
    at most TIMELINE_POINTS. Packed in arrays (20 bytes a point): as tuples of boxed
    numbers, ~100 bytes a point, 2,000 streams of 400 chunks held ~80 MB."""

    __slots__ = ("deltas", "sizes", "times")

    def __init__(self) -> None:
        self.times = array("d")
        self.sizes = array("q")
        self.deltas = array("I")

    def add(self, at: float, size: int, deltas: int) -> None:
        times = self.times
        if len(times) < TIMELINE_POINTS:
            times.append(at)
            self.sizes.append(size)
            self.deltas.append(deltas)

    def __len__(self) -> int:
        return len(self.times)

    def __iter__(self) -> Iterator[tuple[float, int, int]]:
        return zip(self.times, self.sizes, self.deltas, strict=True)


# `bytes` inside StreamView is its byte count: the type under another name.
Bytes = bytes


@dataclass
class StreamView:
    request_id: str
    method: str
    path: str
    started_at: float
    start: float
    model: str | None = None
    dialect: str | None = None
    status: int | None = None
    state: str = "streaming"
    finish_reason: Any = None
    ttft_ms: float | None = None
    duration_ms: float | None = None
    output_tokens_per_s: float | None = None
    bytes: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)
    interruption: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    injected: list[str] | None = None
    timeline: Timeline = field(default_factory=Timeline)
    client_waits: list[tuple[float, float]] = field(default_factory=list)
    text: str | None = None
    tap: Any = None  # while streaming: the tap, for live byte counts
    route: str | None = None
    # Kept for the detail view (see Retention): the chunks as (monotonic time, bytes).
    chunks: list[tuple[float, Bytes]] = field(default_factory=list)
    kept_bytes: int = 0
    dropped_bytes: int = 0  # bytes beyond a bound, not kept (nor anything after them)
    budget: ByteBudget | None = None
    stream_bytes: int = 0  # this view's own bound
    events_gone: bool = False  # it had bytes; they were let go for newer streams
    record: dict[str, Any] | None = None
    request_headers: dict[str, str] | None = None
    response_headers: dict[str, str] | None = None
    secrets: Secrets = NO_SECRETS
    session_id: str | None = None  # a WebSocket session's turn: the row goes under the session's
    turn: int | None = None
    answered_by: str | None = None  # the record's: proxy, upstream, or None
    run_id: str | None = None  # the agent run it belongs to: its row goes under the run's
    client: str | None = None  # "name version", as the record's `client`

    @property
    def refused(self) -> bool:
        """The proxy's own refusal (no route, bad target, ...): counted apart from the
        upstream's errors, as `sseproxy report` does (its 502 for an unreachable upstream
        carries the cut and is not one)."""
        return self.state == "http_error" and self.answered_by == "proxy" and not self.interruption

    # -- a TapObserver of the proxy's tap: its chunks only (the list is rebuilt from them) --

    @property
    def watching(self) -> bool:
        return False

    def on_chunk(self, chunk: Bytes) -> None:
        self.chunk(chunk, time.monotonic())

    def on_item(self, item: TapItem) -> None:
        """Never called: the view watches chunks only, which keeps the tap's fast paths."""

    def chunk(self, data: Bytes, arrived: float) -> None:
        """The relay fed the tap this chunk at `arrived` (monotonic): keep it, within bounds.
        Once one does not fit, nothing later is kept: the kept bytes are the body's start."""
        budget = self.budget
        if budget is None:
            return
        if self.dropped_bytes:
            self.dropped_bytes += len(data)
            return
        room = min(self.stream_bytes - self.kept_bytes, budget.room)
        kept = data if len(data) <= room else data[:room]
        if kept:
            budget.used += len(kept)
            self.chunks.append((arrived, kept))
            self.kept_bytes += len(kept)
        self.dropped_bytes += len(data) - len(kept)

    def let_go(self) -> None:
        """Give the kept bytes back (the ring moved on); the detail says they are gone."""
        if self.budget is not None:
            self.budget.give(self.kept_bytes)
            self.budget = None
        if self.chunks:
            self.events_gone = True
        self.chunks = []
        self.kept_bytes = 0

    def row(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "started_at": self.started_at,
            "model": self.model,
            "dialect": self.dialect,
            "status": self.status,
            "state": self.state,
            "finish_reason": self.finish_reason,
            "ttft_ms": self.ttft_ms,
            "duration_ms": self.duration_ms
            if self.duration_ms is not None
            else round((time.monotonic() - self.start) * 1000, 1),
            "output_tokens_per_s": self.output_tokens_per_s,
            "bytes": self.tap.bytes if self.tap is not None else self.bytes,
            "anomalies": self.anomalies,
            "interruption": self.interruption,
            "error": self.error,
            "injected": self.injected,
            "route": self.route,
            "session_id": self.session_id,
            "turn": self.turn,
            "answered_by": self.answered_by,
            "refused": self.refused,
            "run_id": self.run_id,
            "client": self.client,
        }

    def client_wait(self, began: float, ended: float) -> None:
        """A write to the client waited from `began` to `ended` (monotonic clock): the client
        was not reading. Shown beside the upstream chunks; bounded per stream."""
        waits = self.client_waits
        if ended <= began:
            return
        if waits and began - waits[-1][1] < WAIT_JOIN_S:
            waits[-1] = (waits[-1][0], ended)  # one blocked stretch, written chunk by chunk
        elif len(waits) < WAIT_SPANS:
            waits.append((began, ended))

    def detail(
        self, retention: Retention = Retention(), keep_content: bool = False
    ) -> dict[str, Any]:
        def ms(t: float) -> float:
            return round((t - self.start) * 1000, 3)

        out: dict[str, Any] = {
            **self.row(),
            "timeline": [
                {"t_ms": ms(t), "bytes": size, "content": content}
                for t, size, content in self.timeline
            ],
            "client_waits": [{"from_ms": ms(a), "to_ms": ms(b)} for a, b in self.client_waits],
            "text": self.text,
            "record": self.record,
            "request_headers": self.request_headers,
            "response_headers": self.response_headers,
            "retained": self.retained(keep_content),
        }
        if self.chunks and self.tap is None:  # finished: the bytes are all there will be
            chunks = [(ms(t), data) for t, data in self.chunks]
            record = self.record or {}
            cut = bool(self.interruption) or bool(self.dropped_bytes)
            listing = EventList(retention.events, retention.chars, self.secrets)
            out.update(
                listing.build(
                    chunks,
                    self.dialect,
                    record.get("content_type"),
                    _header(self.response_headers, "content-encoding"),
                    whole=not cut,
                )
            )
            if _header(self.response_headers, "content-encoding") in (None, "identity"):
                partial = (self.interruption or {}).get("partial_event_bytes") or 0
                tail = 0 if self.dropped_bytes else partial  # the tail was not kept
                out["raw"] = raw_view(
                    chunks, self.secrets, bool(self.dropped_bytes), retention.chars, tail
                )
            out["kept_bytes"] = self.kept_bytes
            out["dropped_bytes"] = self.dropped_bytes
        return out

    def retained(self, keep_content: bool) -> str:
        """Whether the detail has the stream's events: kept, gone (the ring moved on), off
        (keep_content is off), running, or none (no body arrived)."""
        if self.events_gone:
            return "gone"
        if not keep_content:
            return "off"
        if self.tap is not None:
            return "running"
        return "kept" if self.chunks else "none"


def inspected_client(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """A live row's `run_id` and `client`, from the request's headers (its record, at the
    end, says the same)."""
    return client_row(client_fields(headers))


def client_row(fields: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A live row's `run_id` and `client`, from `client_fields` already worked out."""
    return fields["run_id"], client_label(fields["client"])


def client_label(client: Any) -> str | None:
    """A record's `client` as the list shows it: `codex 0.171.0`."""
    if not isinstance(client, Mapping) or not client.get("name"):
        return None
    version = client.get("version")
    return f"{client['name']} {version}" if version else str(client["name"])


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return value.strip().lower()
    return None


def shown_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Redacted headers, bounded for the page: MAX_HEADERS, each value HEADER_CHARS."""
    return {str(k)[:HEADER_CHARS]: v[:HEADER_CHARS] for k, v in list(headers.items())[:MAX_HEADERS]}


def batch(views: Iterable[StreamView | SessionView]) -> bytes:
    """One SSE message carrying a JSON array of rows."""
    return b"data: " + orjson.dumps([view.row() for view in views]) + b"\n\n"


@dataclass(eq=False)
class Viewer:
    queue: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(SUBSCRIBER_QUEUE))
    lagging: bool = False


class Inspector:
    def __init__(
        self,
        keep_content: bool = False,
        max_viewers: int = MAX_VIEWERS,
        retention: Retention | None = None,
        captures: CaptureStore | None = None,
        session_retention: SessionRetention | None = None,
    ) -> None:
        self.keep_content = keep_content
        self.max_viewers = max_viewers
        self.retention = retention or Retention()
        self.budget = ByteBudget(self.retention.total_bytes)
        self.captures = captures
        # Rebuilding a stream's event list takes up to ~0.2 s for a full 1 MiB of tiny events
        self._building = asyncio.Semaphore(1)
        self.streams: OrderedDict[str, StreamView] = OrderedDict()
        # Finished streams still holding their bytes, oldest first (at most retention.streams).
        self.kept: OrderedDict[str, StreamView] = OrderedDict()
        self.active: dict[str, StreamView] = {}
        self.session_retention = session_retention or SessionRetention(chars=self.retention.chars)
        self.sessions: OrderedDict[str, SessionView] = OrderedDict()
        self.live_sessions: dict[str, SessionView] = {}
        self.subscribers: set[Viewer] = set()
        self.changed: dict[str, StreamView | SessionView] = {}
        self._ticker: asyncio.Task[None] | None = None

    # -- fed by the proxy -------------------------------------------------------------------

    def started(self, view: StreamView) -> None:
        self.streams[view.request_id] = view
        self.active[view.request_id] = view
        self._trim_ring()
        if self.keep_content and self.retention.streams > 0 and isinstance(view.tap, StreamTap):
            view.budget = self.budget
            view.stream_bytes = self.retention.stream_bytes
            view.tap.observe(view)
        self.publish(view)

    def _trim_ring(self) -> None:
        while len(self.streams) > RING_SIZE:
            _, old = self.streams.popitem(last=False)
            self.kept.pop(old.request_id, None)
            old.let_go()

    def _keep(self, view: StreamView) -> None:
        """A finished stream keeps its bytes; the oldest beyond `retention.streams` let go."""
        if view.chunks:
            self.kept[view.request_id] = view
        while len(self.kept) > self.retention.streams:
            _, old = self.kept.popitem(last=False)
            old.let_go()

    def finished(
        self,
        request_id: str,
        record: Mapping[str, Any],
        text: str | None,
        headers: tuple[Mapping[str, str], Mapping[str, str] | None] | None = None,
        secrets: Secrets = NO_SECRETS,
        started_at: float | None = None,
    ) -> None:
        """`headers`: the request's and the response's (None: no response), both redacted as
        a capture keeps them; `secrets`: the request's, to mask its credentials in the bytes;
        `started_at`: when it began (wall clock), for a row made only now (a session's turn)."""
        view = self.active.pop(request_id, None) or self.streams.get(request_id)
        if view is None:  # ended before any response (404, 413, 502, ...), or a turn
            began = started_at if started_at is not None else time.time()
            view = StreamView(request_id, record["method"], record["path"], began, 0.0)
            self.streams[request_id] = view
            self._trim_ring()
        if isinstance(view.tap, StreamTap):
            view.tap.observe(None)
        view.tap = None
        view.record = dict(record)
        view.route = record.get("route")
        view.secrets = secrets
        if headers is not None:
            request_headers, response_headers = headers
            view.request_headers = shown_headers(request_headers)
            if response_headers is not None:
                view.response_headers = shown_headers(response_headers)
        self._keep(view)
        for key in (
            "state",
            "dialect",
            "status",
            "finish_reason",
            "ttft_ms",
            "duration_ms",
            "output_tokens_per_s",
            "bytes",
            "anomalies",
            "interruption",
            "error",
            "injected",
            "answered_by",
        ):
            if key in record:
                setattr(view, key, record[key])
        view.model = record.get("model") or record.get("response_model")
        view.run_id = record.get("run_id") or view.run_id
        view.client = client_label(record.get("client")) or view.client
        if self.keep_content and text is not None:
            view.text = text[:CONTENT_CHARS]
        if record.get("session_id"):  # a turn: its row goes under its session's
            view.session_id, view.turn = record["session_id"], record.get("turn")
            session = self.sessions.get(view.session_id)
            if session is not None:
                session.turn_ended(view.turn, request_id, view.record)
                self.publish(session)
        self.publish(view)

    def session_started(self, view: SessionView) -> None:
        """A session's 101 went out: its row, live until `session_finished`."""
        self.sessions[view.session_id] = view
        self.live_sessions[view.session_id] = view
        view.retention = self.session_retention
        if self.keep_content:
            view.budget = self.budget
        while len(self.sessions) > self.session_retention.sessions:
            _, old = self.sessions.popitem(last=False)
            self.live_sessions.pop(old.session_id, None)
            old.let_go()
            for _, turn_id in old.turn_ids:  # no turn row is left without its session
                self.streams.pop(turn_id, None)
                self.kept.pop(turn_id, None)
        self.publish(view)

    def session_finished(self, session_id: str, record: Mapping[str, Any]) -> None:
        view = self.live_sessions.pop(session_id, None)
        if view is not None:
            view.finish(dict(record))
            self.publish(view)

    # -- the page's feed --------------------------------------------------------------------

    def publish(self, view: StreamView | SessionView) -> None:
        """Mark a row changed; the next flush sends it (only the latest state of each row).
        Without a viewer nothing is marked: a page that opens gets every row at once."""
        if self.subscribers:
            self.changed[view.request_id] = view

    def flush(self, progress: bool = True) -> None:
        """Send the changed rows, serialised once, to every viewer; with `progress`, every
        running stream too (its bytes and duration move on)."""
        if not self.subscribers:
            self.changed.clear()
            return
        if progress:
            for view in self.active.values():
                self.changed.setdefault(view.request_id, view)
            for session in self.live_sessions.values():
                self.changed.setdefault(session.session_id, session)
        if not self.changed:
            return
        message = batch(self.changed.values())
        self.changed = {}
        for viewer in list(self.subscribers):
            try:
                viewer.queue.put_nowait(message)
            except asyncio.QueueFull:
                viewer.lagging = True

    async def tick(self) -> None:
        flushes = 0
        while True:
            await asyncio.sleep(1 / FLUSHES_PER_SECOND)
            flushes += 1
            self.flush(progress=flushes % PROGRESS_EVERY == 0)

    async def start(self, app: web.Application) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self.tick())

    async def stop(self, app: web.Application) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for viewer in list(self.subscribers):
            viewer.lagging = True
            with contextlib.suppress(asyncio.QueueFull):
                viewer.queue.put_nowait(b"")  # wakes the feed so that it ends

    def rows(self) -> list[StreamView | SessionView]:
        """Streams and sessions, oldest first (a session before its turns)."""
        views: list[StreamView | SessionView] = [*self.sessions.values(), *self.streams.values()]
        return sorted(views, key=lambda view: view.started_at)

    def snapshot(self) -> bytes:
        """The current rows as JSON, oldest first, safe inside an HTML <script> element."""
        rows = orjson.dumps([view.row() for view in self.rows()])
        return rows.replace(b"<", b"\\u003c").replace(b"\xe2\x80\xa8", b"\\u2028")

    # -- handlers ---------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.Response:
        html = resources.files("sseproxy").joinpath("data/inspector.html").read_bytes()
        html = html.replace(b"/*SNAPSHOT*/[]", self.snapshot(), 1)
        return web.Response(
            body=html,
            content_type="text/html",
            charset="utf-8",
            headers={"Cache-Control": "no-store", **NO_FRAMING},
        )

    async def feed(self, request: web.Request) -> web.StreamResponse:
        if len(self.subscribers) >= self.max_viewers:
            return web.json_response(
                {
                    "error": {
                        "type": "sseproxy_too_many_viewers",
                        "message": f"at most {self.max_viewers} inspector pages at once",
                    }
                },
                status=503,
                headers={"Retry-After": "5"},
            )
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
                **NO_FRAMING,
            }
        )
        viewer = Viewer()
        viewer.queue.put_nowait(batch(self.rows()))
        self.subscribers.add(viewer)
        try:
            await response.prepare(request)
            while True:
                message = await viewer.queue.get()
                if not message or viewer.lagging:
                    break  # shutting down, or too far behind: the page reconnects
                await response.write(message)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.subscribers.discard(viewer)
        return response

    async def stream(self, request: web.Request) -> web.Response:
        view = self.streams.get(request.match_info["request_id"])
        if view is None:
            return web.json_response({"error": {"type": "sseproxy_not_found"}}, status=404)
        async with self._building:  # one at a time, off the loop: forwarding never waits
            detail = await asyncio.to_thread(view.detail, self.retention, self.keep_content)
        detail["capture"] = self.capture_of(view.request_id)
        return web.Response(body=orjson.dumps(detail), content_type="application/json")

    async def session(self, request: web.Request) -> web.Response:
        view = self.sessions.get(request.match_info["session_id"])
        if view is None:
            return web.json_response({"error": {"type": "sseproxy_not_found"}}, status=404)
        async with self._building:
            detail = await asyncio.to_thread(view.detail, self.keep_content)
        detail["capture"] = self.capture_of(view.session_id)
        return web.Response(body=orjson.dumps(detail), content_type="application/json")

    def capture_of(self, request_id: str) -> dict[str, Any] | None:
        """Where this stream's capture is, if the store saved one: its files' download links
        (relative to the page) and the command line that replays it."""
        if self.captures is None:
            return None
        files = self.captures.files_of(request_id)
        if files is None:
            return None
        sidecar, _ = files
        return {
            "sidecar": f"captures/{request_id}/sidecar",
            "body": f"captures/{request_id}/body",
            "file": sidecar.name,
            "replay": f"sseproxy replay {sidecar}",
        }

    async def capture_file(self, request: web.Request) -> web.StreamResponse:
        """One file of a capture, found by the request id in the store (never by a path from
        the URL: nothing the URL says reaches the file system)."""
        files = None
        if self.captures is not None:
            files = self.captures.files_of(request.match_info["request_id"])
        kind = request.match_info["kind"]
        if files is None or kind not in ("sidecar", "body"):
            return web.json_response({"error": {"type": "sseproxy_not_found"}}, status=404)
        path: Path = files[0] if kind == "sidecar" else files[1]
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except OSError:  # deleted since (the directory's cap)
            return web.json_response({"error": {"type": "sseproxy_not_found"}}, status=404)
        return web.Response(
            body=data,
            content_type="application/json" if kind == "sidecar" else "application/octet-stream",
            headers={
                "Content-Disposition": f'attachment; filename="{path.name}"',
                "Cache-Control": "no-store",
                **NO_FRAMING,
            },
        )
