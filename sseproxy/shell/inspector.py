"""The live inspector: active and recent streams for a person looking at a browser.

A bounded ring of stream views, fed by the proxy at a stream's start, on a timer while it
runs, and at its end. Changes are coalesced: at most FLUSHES_PER_SECOND times a second the
changed rows are serialised once, as one batch, and the same bytes go to every viewer, so the
cost of a busy proxy does not multiply by the number of open pages. The page is one
self-contained file (no CDN, no build step) that carries the current rows in its first paint.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import orjson
from aiohttp import web

from ..admin import NO_FRAMING

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
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    client_waits: list[tuple[float, float]] = field(default_factory=list)
    text: str | None = None
    tap: Any = None  # while streaming: the tap, for live byte counts

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

    def detail(self) -> dict[str, Any]:
        def ms(t: float) -> float:
            return round((t - self.start) * 1000, 3)

        return {
            **self.row(),
            "timeline": [
                {"t_ms": ms(t), "bytes": size, "content": content}
                for t, size, content in self.timeline
            ],
            "client_waits": [{"from_ms": ms(a), "to_ms": ms(b)} for a, b in self.client_waits],
            "text": self.text,
        }


def batch(views: Iterable[StreamView]) -> bytes:
    """One SSE message carrying a JSON array of rows."""
    return b"data: " + orjson.dumps([view.row() for view in views]) + b"\n\n"


@dataclass(eq=False)
class Viewer:
    queue: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(SUBSCRIBER_QUEUE))
    lagging: bool = False


class Inspector:
    def __init__(self, keep_content: bool = False, max_viewers: int = MAX_VIEWERS) -> None:
        self.keep_content = keep_content
        self.max_viewers = max_viewers
        self.streams: OrderedDict[str, StreamView] = OrderedDict()
        self.active: dict[str, StreamView] = {}
        self.subscribers: set[Viewer] = set()
        self.changed: dict[str, StreamView] = {}
        self._ticker: asyncio.Task[None] | None = None

    # -- fed by the proxy -------------------------------------------------------------------

    def started(self, view: StreamView) -> None:
        self.streams[view.request_id] = view
        self.active[view.request_id] = view
        while len(self.streams) > RING_SIZE:
            self.streams.popitem(last=False)
        self.publish(view)

    def finished(self, request_id: str, record: Mapping[str, Any], text: str | None) -> None:
        view = self.active.pop(request_id, None) or self.streams.get(request_id)
        if view is None:  # ended before any response (404, 413, 502, ...)
            view = StreamView(request_id, record["method"], record["path"], time.time(), 0.0)
            self.streams[request_id] = view
            while len(self.streams) > RING_SIZE:
                self.streams.popitem(last=False)
        view.tap = None
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
        ):
            if key in record:
                setattr(view, key, record[key])
        view.model = record.get("model") or record.get("response_model")
        if self.keep_content and text is not None:
            view.text = text[:CONTENT_CHARS]
        self.publish(view)

    # -- the page's feed --------------------------------------------------------------------

    def publish(self, view: StreamView) -> None:
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

    def snapshot(self) -> bytes:
        """The current rows as JSON, oldest first, safe inside an HTML <script> element."""
        rows = orjson.dumps([view.row() for view in self.streams.values()])
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
        viewer.queue.put_nowait(batch(self.streams.values()))
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
        return web.Response(body=orjson.dumps(view.detail()), content_type="application/json")
