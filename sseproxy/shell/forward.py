"""One exchange with the upstream: send the admitted request, check the response head, start
the client's response, let the relay carry the body, end the client's response as the
upstream's ended."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from aiohttp import web

from sseproxy.capture.store import redact_headers
from sseproxy.config import Settings
from sseproxy.core import Dialect, EndReason
from sseproxy.core.dialects import detect
from sseproxy.core.events import Framing
from sseproxy.core.inject import Injector
from sseproxy.core.pacing import Pacing
from sseproxy.core.readers import framing_for
from sseproxy.inspector.endpoints import CONTENT_CHARS, StreamView, client_row
from sseproxy.observe.clients import client_fields
from sseproxy.shell import accelerator
from sseproxy.shell.admission import Refused, via_entry
from sseproxy.shell.delivery import ClientDelivery, ContentWatch
from sseproxy.shell.errors import CLIENT_IO, Ended
from sseproxy.shell.record import NO_BODY_STATUSES
from sseproxy.shell.relay import BodyEnd, Drill, Identity, IdleWatch, Parts, Relay
from sseproxy.shell.sinks import start_capture
from sseproxy.shell.state import Answerer
from sseproxy.shell.tapping import open_tap, tap_options
from sseproxy.shell.upstream import (
    LIMITS,
    REQUEST_DROP,
    UpstreamEnd,
    UpstreamFailed,
    UpstreamResponse,
    forwardable,
    upstream_url,
)
from sseproxy.shell.upstream import Framing as BodyFraming
from sseproxy.shell.upstream.trailers import accepts_trailers, announced, section

if TYPE_CHECKING:
    from sseproxy.shell.state import Exchange, Progress, ProxyState
REQUEST_ID_HEADER = "x-sseproxy-request-id"
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


async def forward(
    request: web.Request, x: Exchange, state: ProxyState, settings: Settings
) -> web.StreamResponse:
    """Send the admitted request upstream and relay its response."""
    facts = x.facts
    route = facts.route
    assert route is not None and state.pool is not None
    try:
        url = upstream_url(route, request.raw_path)  # scheme, host and port only from the route
    except ValueError as exc:
        raise Refused(400, "bad_target", str(exc)) from exc
    headers = forwardable(request.headers, drop=REQUEST_DROP)
    via = request.headers.getall("Via", ())
    headers["Via"] = ", ".join([*via, via_entry(state)]) if via else via_entry(state)
    if state.tracing is not None:
        x.progress.span = state.tracing.start(request.headers, headers, request.method, facts.path)
    waiting = Waiting()
    try:
        upstream = await state.pool.request(
            request.method,
            url,
            list(headers.items()),
            facts.body,
            waiting,
            head_timeout=settings.idle_timeout,  # no byte of the response yet
        )
    except UpstreamFailed as failed:
        status = 504 if failed.reason is EndReason.IDLE_TIMEOUT else 502
        raise Refused(
            status,
            UPSTREAM_ERROR_TYPES.get(failed.reason, "upstream_unreachable"),
            failed.cause,
            end=failed.reason,
            upstream=route.upstream,  # userinfo masked
        ) from failed
    except ValueError as exc:  # a header the upstream request cannot carry
        raise Refused(400, "bad_request", str(exc)) from exc
    # The body waits until the relay takes it (the client's response must start first).
    upstream.pause_reading()
    try:
        await state.steps.wait()  # as many responses may start at once as were admitted
        return await respond(request, x, state, settings, upstream, waiting)
    finally:
        # Stop generation (and billing) now unless the body ended; the pool keeps the
        # connection only when it ended by its own framing and the pool's rules allow.
        upstream.abort(EndReason.CLIENT_DISCONNECTED, "the proxy stopped relaying")


class Waiting:
    """The receiver until the relay exists. The body is paused at once, so at most a read
    already under way arrives here; it and an end that comes meanwhile go to the relay."""

    __slots__ = ("chunks", "end")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.end: UpstreamEnd | None = None

    def on_body(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    def on_end(self, end: UpstreamEnd) -> None:
        self.end = end

    def hand_over(self, upstream: UpstreamResponse, relay: Relay) -> None:
        upstream.set_receiver(relay)
        for chunk in self.chunks:
            relay.on_body(chunk)
        self.chunks = []
        if self.end is not None:
            relay.on_end(self.end)


async def respond(
    request: web.Request,
    x: Exchange,
    state: ProxyState,
    settings: Settings,
    upstream: UpstreamResponse,
    waiting: Waiting,
) -> web.StreamResponse:
    """Start the client's response, relay, end it as the upstream's ended."""
    p = x.progress
    p.timings.headers = time.monotonic()
    p.status, p.answered_by = upstream.status, Answerer.UPSTREAM
    begin(request, x, state, settings, upstream)
    response = client_response(request, x, upstream)
    transform: Identity | Drill = Identity()
    if x.facts.inject_rules:
        assert p.tap is not None
        framing = framing_for(p.content_type)
        transform = Drill(Injector(x.facts.inject_rules, p.tap.dialect, framing=framing))
    try:
        with CLIENT_IO:
            await response.prepare(request)
        p.delivery = ClientDelivery(request, response, p.tap, mark=settings.max_client_held_bytes)
        end = await relay(x, upstream, waiting, transform, state, settings)
        if (ended := upstream.ended) is not None:
            p.trailers = ended.trailers  # recorded whether or not the client gets them
        # The upstream body ended by its own HTTP framing: end ours the same way. The verdict
        # may still say `interrupted` (no terminal event): that is what the record is for.
        p.end, p.http_complete = end.reason, end.complete
        p.bytes_after_end = end.bytes_after_end
        if not end.complete:
            raise Ended(end.reason, end.cause)
    except Ended as ended:
        p.end, p.http_complete = ended.reason, False
        if ended.reason is EndReason.CLIENT_DISCONNECTED:
            p.client_left(upstream_ended(upstream))
    except asyncio.CancelledError:  # the client left (or a shutdown): how far had it got?
        p.cancelled_at(upstream_ended(upstream), received_all(response, p.delivery))
        raise
    if p.http_complete:
        p.delivered = True  # every upstream byte was written: a close from now changes nothing
        if p.trailer_names:
            send_trailers(request, p)
        with contextlib.suppress(Exception):
            await response.write_eof()
    else:
        break_downstream(request)
    return response


def upstream_ended(upstream: UpstreamResponse) -> bool:
    """Whether the upstream body had ended by its own framing (the leg read all of it)."""
    end = upstream.ended
    return end is not None and end.complete


def received_all(response: web.StreamResponse, delivery: ClientDelivery | None) -> bool:
    """Whether the client's connection took every byte of a Content-Length body (its client
    then has the whole response, and may close while the analysis still runs)."""
    length = response.content_length
    return delivery is not None and length is not None and delivery.client_bytes >= length


def client_response(
    request: web.Request, x: Exchange, upstream: UpstreamResponse
) -> web.StreamResponse:
    """The client's response head: the upstream's, minus hop-by-hop fields, plus ours."""
    p = x.progress
    headers = forwardable(upstream.headers)
    if x.facts.inject_rules:
        headers.popall("Content-Length", None)  # the drill changes the body's length
    headers[REQUEST_ID_HEADER] = x.facts.request_id
    if p.stream:
        headers["X-Accel-Buffering"] = "no"
        headers["Cache-Control"] = "no-cache"
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    no_body = request.method == "HEAD" or upstream.status in NO_BODY_STATUSES
    if request.version >= (1, 1) and "Content-Length" not in headers and not no_body:
        # What aiohttp would choose by itself, said explicitly: `response.chunked` is then
        # true exactly when the body is sent in chunks (the accelerator frames by it).
        response.enable_chunked_encoding()
    if response.chunked and trailers_travel(request, x, upstream):
        names = announced(
            upstream.headers.getall("Trailer", ()),
            upstream.headers.getall("Connection", ()),
            limit=LIMITS.trailer_fields,
        )
        if names:
            p.trailer_names = names
            response.headers["Trailer"] = ", ".join(names)
            # The end closes the connection (aiohttp's own last chunk must not follow ours):
            # said in the head, so the client does not send another request on it.
            response.force_close()
    return response


def trailers_travel(request: web.Request, x: Exchange, upstream: UpstreamResponse) -> bool:
    """The client may get the upstream's trailers: it said `TE: trailers`, the upstream body is
    chunked, no drill rewrites it, and the accelerator can end a response with them."""
    return (
        upstream.framing is BodyFraming.CHUNKED
        and not x.facts.inject_rules
        and accelerator.trailers_enabled()
        and accepts_trailers(request.headers.getall("TE", ()))
    )


def send_trailers(request: web.Request, p: Progress) -> None:
    """End the client's response with the announced trailers the upstream sent. A response
    with no body yet has no head on the wire either: aiohttp's own end then sends both."""
    if p.delivery is None or not p.delivery.started:
        return
    end, names = section(p.trailers, p.trailer_names)
    if accelerator.end_with_trailers(request.transport, end):
        p.trailers_forwarded = names


async def relay(
    x: Exchange,
    upstream: UpstreamResponse,
    waiting: Waiting,
    transform: Identity | Drill,
    state: ProxyState,
    settings: Settings,
) -> BodyEnd:
    """Relay the body with the idle and content watches armed; the upstream's end."""
    p = x.progress
    assert p.tap is not None and p.view is not None and p.pacing is not None
    assert p.delivery is not None
    # An MCP `subscriptions/listen` stream stays open until either side closes it: silence
    # there is no stall, so neither the idle nor the content timeout cuts it.
    listen = x.facts.asked.mcp_listen
    watch = IdleWatch(
        None if listen else settings.idle_timeout,
        lambda: upstream.abort(
            EndReason.IDLE_TIMEOUT, f"no upstream byte for {settings.idle_timeout} s"
        ),
    )
    stalls = None
    if settings.content_timeout is not None and not listen:
        timeout = settings.content_timeout
        stalls = ContentWatch(
            timeout,
            settings.content_stall_action,
            lambda: upstream.abort(EndReason.CONTENT_TIMEOUT, f"no content delta for {timeout} s"),
        )
    parts = Parts(p.tap, p.timings, p.pacing, p.view, p.delivery, watch, stalls, p.capture)
    relay = Relay(
        parts,
        transform,
        mark=settings.max_client_held_bytes,
        budget=state.held,
        idle_timeout=settings.idle_timeout,
        turns=state.analysis,
        steps=state.steps,
    )
    relay.upstream = upstream
    waiting.hand_over(upstream, relay)
    if not relay.paused:  # what was handed over may have pressed it (its task resumes it)
        upstream.resume_reading()
    try:
        return await relay.run()
    except asyncio.CancelledError:
        upstream.abort(EndReason.CLIENT_DISCONNECTED, "the client left")
        raise
    finally:
        watch.stop()
        if stalls is not None:
            stalls.stop()


def begin(
    request: web.Request,
    x: Exchange,
    state: ProxyState,
    settings: Settings,
    upstream: UpstreamResponse,
) -> None:
    """Open the tap, the inspector's view and the capture for this response."""
    p, facts = x.progress, x.facts
    dialect: Dialect | None = facts.route.dialect if facts.route else None
    if settings.dialect != "auto":
        dialect = Dialect(settings.dialect)
    dialect = dialect or detect(request.method, request.path, upstream.headers, facts.asked)
    p.content_type = upstream.headers.get("Content-Type")
    p.stream = framing_for(p.content_type) in STREAM_FRAMINGS
    p.tap = open_tap(
        dialect,
        p.content_type,
        upstream.headers.get("Content-Encoding"),
        tap_options(
            settings.max_event_bytes,
            CONTENT_CHARS if settings.keep_content else 0,
            settings.resume_ledger_events if settings.resume_ledger_streams else 0,
            defer=True,  # the relay pumps large reads through the proxy's analysis turns
        ),
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
    p.client = client_fields(facts.headers)  # the record's too
    p.view.run_id, p.view.client = client_row(p.client)
    state.inspector.started(p.view)
    p.capture = start_capture(state, facts, p, dialect)


def break_downstream(request: web.Request) -> None:
    """Close the client connection without a clean end, so the client sees the break."""
    transport = request.transport
    if transport is not None and not transport.is_closing():
        transport.close()
