"""Upstream exchange and the one relay loop: chunk -> [injector] -> write -> tap -> timings.

Every read and write sits inside `UPSTREAM_IO` / `CLIENT_IO`, so a failure arrives here as
`Ended(reason)`; the loop itself never decides why a stream ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from ..capture import redact_headers
from ..config import Settings
from ..core import Dialect, EndReason, StreamTap
from ..core.dialects import detect
from ..core.events import Framing
from ..core.inject import Close as InjectClose
from ..core.inject import Injector
from ..core.inject import KeepAlive as InjectKeepAlive
from ..core.inject import Pause as InjectPause
from ..core.inject import Write as InjectWrite
from ..core.pacing import Pacing
from ..core.readers import framing_for
from ..delivery import ClientDelivery, ContentWatch
from .admission import Refused, via_entry
from .errors import CLIENT_IO, UPSTREAM_IO, ContentTimeout, Ended, IdleTimeout
from .inline import attach
from .inspector import CONTENT_CHARS, TIMELINE_POINTS, StreamView
from .tapping import open_tap, tap_options
from .upstream import REQUEST_DROP, forwardable, refusal, upstream_url

if TYPE_CHECKING:
    from .state import Exchange, ProxyState

REQUEST_ID_HEADER = "x-sseproxy-request-id"
# Slices of a compressed body's backlog analysed after each write (a slice is 128 KiB of
# decompressed output, ~5-20 ms): enough to keep up with any real stream's expansion.
SLICES_PER_WRITE = 8
# Compressed input left unanalysed beyond this is analysed before the next read (back-pressure
# on the upstream) rather than held: a bomb's backlog is small, a real stream's never this big.
MAX_UNANALYSED_BYTES = 4 * 1024 * 1024
# The keepalive-stall drill sends keep-alives for at most this long (as `sseproxy mock` does).
MAX_KEEPALIVE_STALL_S = 3600
# Content-Types of a streamed response (the record's `stream`; no buffering by a proxy in front).
STREAM_FRAMINGS = {Framing.SSE, Framing.NDJSON, Framing.EVENTSTREAM}
UPSTREAM_REQUEST_ID_HEADERS = (
    "x-request-id",
    "request-id",
    "x-goog-request-id",
    "x-amzn-requestid",
    "x-generation-id",
    "cf-ray",
)
# How a failure before any response header is named in the proxy's own 502/504.
UPSTREAM_ERROR_TYPES = {
    EndReason.IDLE_TIMEOUT: "upstream_timeout",
    EndReason.UPSTREAM_UNREACHABLE: "upstream_unreachable",
    EndReason.UPSTREAM_RESET: "upstream_reset",
    EndReason.UPSTREAM_PROTOCOL_ERROR: "upstream_protocol_error",
    EndReason.UPSTREAM_CLOSED: "upstream_closed",
}


class IdleWatch:
    """Cuts a stream after `timeout` seconds without an upstream byte.

    The relay only stores the time of each chunk in `last`; one timer per idle period checks
    it. (A timer re-armed per chunk costs more than all of the analysis.)
    """

    def __init__(self, timeout: float, on_expiry: Callable[[], None]) -> None:
        self.timeout = timeout
        self.on_expiry = on_expiry
        self.last = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(timeout, self._check)

    def _check(self) -> None:
        deadline = self.last + self.timeout
        if time.monotonic() >= deadline:
            self.on_expiry()
        else:
            self._handle = self._loop.call_later(deadline - time.monotonic(), self._check)

    def stop(self) -> None:
        self._handle.cancel()


class Identity:
    """The relay's transformation when no drill is asked for: each chunk as it came."""

    done = False

    def feed(self, chunk: bytes) -> Sequence[Any]:
        return (chunk,)

    def finish(self) -> Sequence[Any]:
        return ()


class Drill:
    """The Injector as the relay's transformation: writes become bytes, other steps stay."""

    def __init__(self, injector: Injector) -> None:
        self.injector = injector

    @property
    def done(self) -> bool:
        return self.injector.done

    def feed(self, chunk: bytes) -> Sequence[Any]:
        return [s.data if isinstance(s, InjectWrite) else s for s in self.injector.feed(chunk)]

    def finish(self) -> Sequence[Any]:
        return [s.data if isinstance(s, InjectWrite) else s for s in self.injector.finish()]


async def forward(
    request: web.Request, x: Exchange, state: ProxyState, settings: Settings
) -> web.StreamResponse:
    """Send the admitted request upstream and relay its response."""
    facts = x.facts
    route = facts.route
    assert route is not None and state.session is not None
    try:
        url = upstream_url(route, request.raw_path)  # scheme, host and port only from the route
    except ValueError as exc:
        raise Refused(400, "bad_target", str(exc)) from exc
    headers = forwardable(request.headers, drop=REQUEST_DROP)
    via = request.headers.getall("Via", ())
    headers["Via"] = ", ".join([*via, via_entry(state)]) if via else via_entry(state)
    if state.tracing is not None:
        x.progress.span = state.tracing.start(request.headers, headers, request.method, facts.path)
    try:
        with UPSTREAM_IO:
            async with asyncio.timeout(settings.idle_timeout):  # no byte of the response yet
                upstream = await state.session.request(
                    request.method,
                    url,
                    headers=headers,
                    data=facts.body or None,
                    allow_redirects=False,
                )
    except Ended as ended:
        status = 504 if ended.reason is EndReason.IDLE_TIMEOUT else 502
        raise Refused(
            status,
            UPSTREAM_ERROR_TYPES.get(ended.reason, "upstream_unreachable"),
            ended.cause,
            end=ended.reason,
            upstream=route.upstream,  # userinfo masked
        ) from ended

    def expire() -> None:
        upstream.content.set_exception(
            IdleTimeout(f"no upstream byte for {settings.idle_timeout} s")
        )
        upstream.close()

    def stalled() -> None:  # bytes keep coming (keep-alives, pings), content does not
        silence = ContentTimeout(f"no content delta for {settings.content_timeout} s")
        upstream.content.set_exception(silence)
        upstream.close()

    watch = IdleWatch(settings.idle_timeout, expire)
    stalls = None
    if settings.content_timeout is not None:
        stalls = ContentWatch(settings.content_timeout, settings.content_stall_action, stalled)
    try:
        return await respond(request, x, state, settings, upstream, watch, stalls)
    finally:
        watch.stop()
        if stalls is not None:
            stalls.stop()
        if x.progress.http_complete and upstream.content.at_eof():
            upstream.release()  # keep the upstream connection for the next request
        else:
            upstream.close()  # stop generation (and billing) now; never reuse it


async def respond(
    request: web.Request,
    x: Exchange,
    state: ProxyState,
    settings: Settings,
    upstream: aiohttp.ClientResponse,
    watch: IdleWatch,
    stalls: ContentWatch | None,
) -> web.StreamResponse:
    """Check the response head, start the client's response, relay, end it as upstream did."""
    p = x.progress
    p.timings.headers = time.monotonic()
    why = refusal(upstream)
    if why is not None:
        raise Refused(
            502,
            "upstream_protocol_error",
            f"upstream response {upstream.status} refused: {why}",
            end=EndReason.UPSTREAM_PROTOCOL_ERROR,
        )
    p.status = upstream.status
    begin(request, x, state, settings, upstream)
    headers = forwardable(upstream.headers)
    if x.facts.inject_rules:
        headers.popall("Content-Length", None)  # the drill changes the body's length
    headers[REQUEST_ID_HEADER] = x.facts.request_id
    if p.stream:
        headers["X-Accel-Buffering"] = "no"
        headers["Cache-Control"] = "no-cache"
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    transform: Identity | Drill = Identity()
    if x.facts.inject_rules:
        assert p.tap is not None
        framing = framing_for(p.content_type)
        transform = Drill(Injector(x.facts.inject_rules, p.tap.dialect, framing=framing))
    try:
        with CLIENT_IO:
            writer = await response.prepare(request)
        p.delivery = ClientDelivery(request, response, p.tap)
        await relay(x, upstream, writer, transform, watch, stalls, settings)
        # The upstream body ended by its own HTTP framing: end ours the same way. The verdict
        # may still say `interrupted` (no terminal event): that is what the record is for.
        p.end, p.http_complete = EndReason.UPSTREAM_CLOSED, True
    except Ended as ended:
        p.end, p.http_complete = ended.reason, False
        if ended.reason is EndReason.CLIENT_DISCONNECTED:
            p.client_left(upstream.content.at_eof())
    except asyncio.CancelledError:  # the client left (or a shutdown): how far had it got?
        p.cancelled_at(upstream.content.at_eof(), received_all(response, p.delivery))
        raise
    if p.http_complete:
        p.delivered = True  # every upstream byte was written: a close from now changes nothing
        with contextlib.suppress(Exception):
            await response.write_eof()
    else:
        break_downstream(request)
    return response


def received_all(response: web.StreamResponse, delivery: ClientDelivery | None) -> bool:
    """Whether the client's connection took every byte of a Content-Length body (its client
    then has the whole response, and may close while the analysis still runs)."""
    length = response.content_length
    return delivery is not None and length is not None and delivery.client_bytes >= length


async def relay(
    x: Exchange,
    upstream: aiohttp.ClientResponse,
    writer: AbstractStreamWriter | None,
    transform: Identity | Drill,
    watch: IdleWatch,
    stalls: ContentWatch | None,
    settings: Settings,
) -> None:
    """One upstream chunk, through the transformation, written at once, then accounted for.

    Between the loop's turns, while the client takes bytes without pushing back, the
    `InlineRelay` does the same work from the upstream's data callback (no drill only).
    """
    p = x.progress
    tap, timings, pacing, capture = p.tap, p.timings, p.pacing, p.capture
    assert tap is not None and p.view is not None and pacing is not None
    assert p.delivery is not None
    view, delivery = p.view, p.delivery
    timeline, read, write = view.timeline, upstream.content.readany, delivery.write

    def account(arrived: float, now: float, size: int, deltas: int) -> None:
        timings.chunk(arrived, now, deltas)
        pacing.content(arrived, deltas)
        if stalls is not None:
            stalls.chunk(arrived, deltas)
        if len(timeline) < TIMELINE_POINTS:
            timeline.append((now, size, deltas))

    async def emit(out: bytes, arrived: float) -> float:
        """Write one piece to the client, then account for it; returns when it was written."""
        try:
            with CLIENT_IO:
                await write(out)
        finally:  # counted even when the write failed: these bytes did arrive
            now = time.monotonic()
            account(arrived, now, len(out), tap.feed(out))
        if delivery.last_wait:  # the client was not reading: shown beside upstream chunks
            view.client_wait(now - delivery.last_wait, now)
        # A compressed body is analysed in slices, other streams running between them; a few
        # per write keep the analysis close behind the bytes, the rest waits until the
        # client's response has ended (`analyse_backlog`), so analysis never delays the end.
        slices = 0
        while tap.backlog and (
            slices < SLICES_PER_WRITE or tap.retained_bytes > MAX_UNANALYSED_BYTES
        ):
            await asyncio.sleep(0)
            slices += 1
            if deltas := tap.pump():
                account(now, now, 0, deltas)
        return now

    inline = None
    if type(transform) is Identity:
        inline = attach(upstream, writer, delivery, tap, capture, watch, account)
    while True:
        # Inline only after the first write: aiohttp sends the response head with it.
        if inline is not None and delivery.client_bytes and inline.ready():
            await inline.run()
        with UPSTREAM_IO:
            chunk = await read()
        arrived = watch.last = time.monotonic()
        pacing.first_byte(arrived)
        if capture is not None and chunk:
            capture.chunk(chunk, arrived)
        for out in transform.feed(chunk) if chunk else transform.finish():
            if type(out) is bytes:
                arrived = await emit(out, arrived)  # a drill's next write follows this one
            elif type(out) is InjectKeepAlive:
                upstream.close()  # content never resumes: stop generation now
                await keep_alive(out, emit, watch, stalls)
            else:
                await perform(out, upstream, settings)
        if not chunk or transform.done:
            return


async def analyse_backlog(tap: StreamTap | None) -> None:
    """Analyse what a compressed body still holds, one slice per loop turn, before the verdict
    (the tap would otherwise do it in one go when closed). A second cancellation (a shutdown
    cut) stops the waiting; the tap then finishes the rest itself."""
    with contextlib.suppress(asyncio.CancelledError):
        while tap is not None and tap.backlog:
            await asyncio.sleep(0)
            tap.pump()


async def keep_alive(
    step: InjectKeepAlive,
    emit: Callable[[bytes, float], Awaitable[float]],
    watch: IdleWatch,
    stalls: ContentWatch | None,
) -> NoReturn:
    """The `keepalive-stall` drill: only keep-alives from now on, as a pinging server whose
    generator hangs sends them. Ends at `--content-timeout` (cut mode) or the drill's bound."""
    deadline = time.monotonic() + MAX_KEEPALIVE_STALL_S
    while time.monotonic() < deadline:
        await asyncio.sleep(step.interval_ms / 1000)
        if stalls is not None and stalls.expired:
            raise Ended(EndReason.CONTENT_TIMEOUT, "drill: keep-alives only, no content")
        watch.last = await emit(step.data, time.monotonic())
    raise Ended(EndReason.IDLE_TIMEOUT, "drill: the keep-alive stall reached its bound")


async def perform(step: Any, upstream: aiohttp.ClientResponse, settings: Settings) -> None:
    """A drill step other than a write."""
    if isinstance(step, InjectPause):
        await asyncio.sleep(step.milliseconds / 1000)
    elif isinstance(step, InjectClose):
        raise Ended(EndReason.UPSTREAM_CLOSED, "drill: cut")
    else:  # a stall: the client sees silence until the idle timeout
        upstream.close()
        await asyncio.sleep(settings.idle_timeout)
        raise Ended(EndReason.IDLE_TIMEOUT, "drill: stall")


def begin(
    request: web.Request,
    x: Exchange,
    state: ProxyState,
    settings: Settings,
    upstream: aiohttp.ClientResponse,
) -> None:
    """Open the tap, the inspector's view and the capture for this response."""
    p, facts = x.progress, x.facts
    dialect: Dialect | None = facts.route.dialect if facts.route else None
    if settings.dialect != "auto":
        dialect = Dialect(settings.dialect)
    dialect = dialect or detect(request.method, request.path, upstream.headers)
    p.content_type = upstream.headers.get("Content-Type")
    p.stream = framing_for(p.content_type) in STREAM_FRAMINGS
    p.tap = open_tap(
        dialect,
        p.content_type,
        upstream.headers.get("Content-Encoding"),
        tap_options(settings.max_event_bytes, CONTENT_CHARS if settings.keep_content else 0),
        facts.asked,
    )
    for name in UPSTREAM_REQUEST_ID_HEADERS:
        if name in upstream.headers:
            p.upstream_request_id = upstream.headers[name]
            break
    p.response_headers = redact_headers(upstream.headers, facts.secrets)  # capture, inspector
    p.pacing = Pacing(facts.start)
    p.view = StreamView(
        facts.request_id,
        facts.method,
        facts.path,
        facts.started_at,
        facts.start,
        model=facts.asked.model,
        dialect=str(dialect) if dialect else None,
        status=p.status,
        tap=p.tap,
    )
    state.inspector.started(p.view)
    if state.captures is not None:
        p.capture = state.captures.new(facts.request_id, facts.start)


def break_downstream(request: web.Request) -> None:
    """Close the client connection without a clean end, so the client sees the break."""
    transport = request.transport
    if transport is not None and not transport.is_closing():
        transport.close()
