"""The aiohttp shell: forward every byte at once, tee it into the core, log one record.

The forwarding loop writes each upstream chunk downstream before the tap sees it, and the tap
can never raise into the loop. Exceptions from aiohttp and asyncio are mapped to an
`EndReason` in exactly one place, `end_reason_for()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import structlog
from aiohttp import web
from multidict import CIMultiDict

from . import __version__
from .admin import admin_refusal
from .capture import Capture, CaptureSettings, CaptureStore, redact_headers
from .config import Route, Settings
from .core import (
    Dialect,
    EndReason,
    ErrorInfo,
    Interruption,
    State,
    StreamTap,
    TapOptions,
    Verdict,
    with_transport,
)
from .core.dialects import detect
from .core.inject import Close as InjectClose
from .core.inject import InjectionError, Injector, Rule, parse_rules
from .core.inject import Pause as InjectPause
from .core.inject import Step as InjectStep
from .core.inject import Write as InjectWrite
from .core.request import RequestFacts, request_facts
from .inspector import CONTENT_CHARS, TIMELINE_POINTS, Inspector, StreamView
from .log import json_ready, level_for
from .metrics import Metrics
from .redact import Secrets

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from .tracing import Tracing

log = structlog.get_logger("sseproxy")

SETTINGS = web.AppKey("settings", Settings)
STATE: web.AppKey[ProxyState] = web.AppKey("state")
OWN_PREFIX = "/_sseproxy/"
INJECT_HEADER = "x-sseproxy-inject"
# RFC 9110 §7.6.1: connection-specific fields a proxy must not forward.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
UPSTREAM_REQUEST_ID_HEADERS = (
    "x-request-id",
    "request-id",
    "x-goog-request-id",
    "x-amzn-requestid",
    "x-generation-id",
    "cf-ray",
)
# An exception message can quote a whole malformed response; the error body stays readable.
MAX_CAUSE_CHARS = 300


@dataclass
class ProxyState:
    metrics: Metrics
    inspector: Inspector
    captures: CaptureStore | None = None
    tracing: Tracing | None = None
    started: float = field(default_factory=time.monotonic)
    active: int = 0
    shutting_down: bool = False
    session: aiohttp.ClientSession | None = None


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

    def chunk(self, now: float, content_deltas: int) -> None:
        """One upstream chunk arrived (`content_deltas` content deltas in it)."""
        last = self.last_chunk or self.headers or self.start
        self.max_gap = max(self.max_gap, now - last)
        self.last_chunk = now
        if content_deltas:
            self.content(now)

    def content(self, now: float) -> None:
        if self.first_content is None:
            self.first_content = now
        elif self.last_content is not None:
            self.max_content_gap = max(self.max_content_gap, now - self.last_content)
        self.last_content = now

    def settle(self, last_chunk: float, max_gap: float) -> None:
        """Store what the hot loop kept in locals."""
        if last_chunk > (self.headers or self.start):
            self.last_chunk = last_chunk
        self.max_gap = max(self.max_gap, max_gap)

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
            "duration_ms": round((end - self.start) * 1000, 3),
            "max_gap_ms": None if last_byte is None else round(max_gap * 1000, 3),
            "content_gap_ms": round(content_gap * 1000, 3) if self.first_content else None,
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
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(timeout, self._check)

    def _check(self) -> None:
        deadline = self.last + self.timeout
        if time.monotonic() >= deadline:
            self.expired = True
            self.on_expiry()
        else:
            self._handle = self._loop.call_later(deadline - time.monotonic(), self._check)

    def stop(self) -> None:
        self._handle.cancel()


def end_reason_for(exc: BaseException, *, after_headers: bool) -> EndReason:
    """The one place where transport exceptions become our vocabulary."""
    if isinstance(exc, asyncio.CancelledError):
        return EndReason.CLIENT_DISCONNECTED
    if isinstance(exc, TimeoutError) and not isinstance(exc, aiohttp.ConnectionTimeoutError):
        return EndReason.IDLE_TIMEOUT
    if not after_headers and isinstance(
        exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError | ssl.SSLError
    ):
        return EndReason.UPSTREAM_UNREACHABLE
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionResetError | BrokenPipeError) or (
            isinstance(cause, OSError) and cause.errno == errno.ECONNRESET
        ):
            return EndReason.UPSTREAM_RESET
        cause = cause.__cause__ or cause.__context__
    # aiohttp names the connection error of a truncated body only in the message text.
    if isinstance(exc, aiohttp.ClientPayloadError) and "ConnectionResetError" in str(exc):
        return EndReason.UPSTREAM_RESET
    return EndReason.UPSTREAM_CLOSED


def forwardable(headers: Mapping[str, str], drop: frozenset[str] = frozenset()) -> CIMultiDict[str]:
    """Copy headers minus hop-by-hop ones, including those named in `Connection`."""
    named: set[str] = set()
    for value in headers.getall("Connection", []) if hasattr(headers, "getall") else []:
        named.update(token.strip().lower() for token in value.split(","))
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in named or lower in drop:
            continue
        out.add(name, value)
    return out


def json_error(status: int, etype: str, message: str, **extra: Any) -> web.Response:
    body = {"error": {"type": etype, "message": message, **extra}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


class Exchange:
    """One proxied request: its identity, timings, tap and the record it ends with."""

    def __init__(self, request: web.Request, settings: Settings) -> None:
        self.request = request
        self.settings = settings
        self.state = request.app[STATE]
        self.capture: Capture | None = None
        self.request_body = b""
        self.response_headers: dict[str, str] = {}
        self.end: EndReason | None = None
        self.http_complete = True
        self.writing = False
        self.inject_rules: tuple[Rule, ...] = ()
        self.watch: IdleWatch | None = None
        self.view: StreamView | None = None
        self.span: Span | None = None
        self.request_id = uuid.uuid4().hex
        # Rebuilt with the body once it is read; every sink gets what these redact.
        self.secrets = Secrets.from_request(request.headers, request.raw_path, b"")
        self.timings = Timings(time.monotonic())
        self.tap: StreamTap | None = None
        self.route: Route | None = None
        self.status: int | None = None
        self.content_type: str | None = None
        self.upstream_request_id: str | None = None
        self.facts = RequestFacts()
        self.stream = False
        self.verdict: Verdict | None = None

    def start_tap(self, upstream: aiohttp.ClientResponse) -> StreamTap:
        request = self.request
        dialect = self.route.dialect if self.route else None
        if self.settings.dialect != "auto":
            dialect = Dialect(self.settings.dialect)
        dialect = dialect or detect(request.method, request.path, upstream.headers)
        self.content_type = upstream.headers.get("Content-Type")
        ctype = (self.content_type or "").lower()
        self.stream = "text/event-stream" in ctype or "ndjson" in ctype
        self.tap = StreamTap(
            dialect,
            content_type=self.content_type,
            content_encoding=upstream.headers.get("Content-Encoding"),
            options=TapOptions(
                max_event_bytes=self.settings.max_event_bytes,
                content_chars=CONTENT_CHARS if self.settings.keep_content else 0,
            ),
            request=self.facts,
        )
        for name in UPSTREAM_REQUEST_ID_HEADERS:
            if name in upstream.headers:
                self.upstream_request_id = upstream.headers[name]
                break
        self.response_headers = redact_headers(upstream.headers, self.secrets)
        request = self.request
        self.view = StreamView(
            self.request_id,
            request.method,
            self.secrets.redact_target(request.raw_path),
            time.time(),
            self.timings.start,
            model=self.facts.model,
            dialect=str(dialect) if dialect else None,
            status=self.status,
            tap=self.tap,
        )
        self.state.inspector.started(self.view)
        if self.state.captures is not None:
            self.capture = self.state.captures.new(self.request_id, self.timings.start)
        return self.tap

    def finish(
        self,
        end: EndReason,
        *,
        proxy_error: ErrorInfo | None = None,
        http_complete: bool = True,
    ) -> Verdict:
        """Close the tap, apply what only the shell knows (status, who left), log the record."""
        self.end = end
        self.http_complete = http_complete
        tap = self.tap or StreamTap(Dialect.SSE)
        verdict = tap.close(end, http_complete=http_complete)
        if proxy_error is not None:
            interruption = None if end is EndReason.END_OF_INPUT else Interruption(str(end), 0)
            verdict = verdict.replace(
                state=State.HTTP_ERROR, error=proxy_error, interruption=interruption
            )
        else:
            verdict = with_transport(verdict, self.status, end)
        self.log(verdict)
        return verdict

    def log(self, verdict: Verdict) -> None:
        if self.verdict is not None:
            return  # one record per request, whatever path ends it
        self.verdict = verdict
        request = self.request
        record = verdict.to_dict()
        response_model = record.pop("model")
        secrets = self.secrets
        fields: dict[str, Any] = {
            "request_id": self.request_id,
            "upstream_request_id": self.upstream_request_id,
            "method": request.method,
            "path": secrets.redact_target(request.raw_path),
            "route": self.route.name if self.route else None,
            "upstream": self.route.upstream if self.route else None,
            "status": self.status,
            "content_type": self.content_type,
            "model": self.facts.model,
            "response_model": response_model,
            "stream": self.stream,
            **self.timings.fields(time.monotonic()),
            **record,
        }
        if self.inject_rules:
            fields["injected"] = [str(rule) for rule in self.inject_rules]
        # Once; every sink below gets only this, redacted and serialisable as JSON.
        fields = json_ready(secrets.redact(fields))
        if verdict.error is not None:  # tracing reads the error message from the verdict
            verdict = verdict.replace(error=ErrorInfo(**fields["error"]))
        log.log(level_for(verdict.state), "request.finished", **fields)
        self.state.metrics.observe(verdict, self.status, fields)
        inspector = self.state.inspector
        text = self.tap.primary_text() if inspector.keep_content and self.tap else None
        text = secrets.redact_text(text) if text else text
        inspector.finished(self.request_id, fields, text)
        if self.span is not None and self.state.tracing is not None:
            self.state.tracing.end(self.span, verdict, fields, request=self.request_body)
        if self.capture is not None and self.state.captures is not None:
            meta = self.capture_meta(verdict, fields)
            self.state.captures.save(self.capture, meta, secrets)

    def capture_meta(self, verdict: Verdict, fields: dict[str, Any]) -> dict[str, Any]:
        request = self.request
        assert self.state.captures is not None
        return {
            "method": request.method,
            "path": fields["path"],
            "request_headers": redact_headers(request.headers, self.secrets),
            "request_body_base64": self.state.captures.request_body(self.request_body),
            "status": self.status,
            "response_headers": self.response_headers,
            "dialect": str(verdict.dialect),
            "content_encoding": next(
                (v for k, v in self.response_headers.items() if k.lower() == "content-encoding"),
                None,
            ),
            "end": str(self.end) if self.end else None,
            "http_complete": self.http_complete,
            "verdict": verdict.to_dict(),
            "record": fields,
        }


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    state = request.app[STATE]
    exchange = Exchange(request, settings)
    if state.active >= settings.max_concurrent_streams:
        exchange.status = 503
        exchange.finish(EndReason.END_OF_INPUT, proxy_error=_error("overloaded", "at capacity"))
        return json_error(503, "sseproxy_overloaded", "too many concurrent streams")
    state.active += 1
    state.metrics.active.inc()
    try:
        return await forward(exchange, state)
    finally:
        state.active -= 1
        state.metrics.active.dec()


def _error(etype: str, message: str) -> ErrorInfo:
    return ErrorInfo(type=f"sseproxy_{etype}", code=None, message=message)


async def forward(exchange: Exchange, state: ProxyState) -> web.StreamResponse:
    request, settings = exchange.request, exchange.settings
    route = exchange.route = settings.route_for(request.path)
    if route is None:
        exchange.status = 404
        exchange.finish(EndReason.END_OF_INPUT, proxy_error=_error("no_route", "no route"))
        return web.Response(
            status=404,
            content_type="application/json",
            body=orjson.dumps(
                {
                    "error": {
                        "type": "sseproxy_no_route",
                        "message": f"no configured route matches {request.path}",
                        "routes": [r.describe() for r in settings.routes],
                    }
                }
            ),
        )
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        exchange.status = 413
        too_large = _error("request_too_large", "request body too large")
        exchange.finish(EndReason.END_OF_INPUT, proxy_error=too_large)
        return json_error(
            413,
            "sseproxy_request_too_large",
            f"request body exceeds {settings.max_request_body_bytes} bytes",
        )
    exchange.facts = request_facts(request.path, request.query_string, body)
    exchange.request_body = body
    exchange.secrets = exchange.secrets.with_body(body)
    try:
        exchange.inject_rules = injection_rules(request, route, settings)
    except InjectionError as exc:
        exchange.status = 403 if "disabled" in str(exc) else 400
        exchange.finish(EndReason.END_OF_INPUT, proxy_error=_error("injection", str(exc)))
        return json_error(exchange.status, "sseproxy_injection", str(exc))
    url = route.target(request.raw_path)
    headers = forwardable(
        request.headers, drop=frozenset({"host", "content-length", INJECT_HEADER})
    )
    assert state.session is not None
    if state.tracing is not None:
        target = exchange.secrets.redact_target(request.raw_path)
        exchange.span = state.tracing.start(request.headers, headers, request.method, target)
    try:
        async with asyncio.timeout(settings.idle_timeout):  # no byte of the response yet
            upstream = await state.session.request(
                request.method,
                url,
                headers=headers,
                data=body if body else None,
                allow_redirects=False,
            )
    except BaseException as exc:
        return unreachable(exchange, exc)
    watch = IdleWatch(settings.idle_timeout, upstream.close)
    exchange.watch = watch
    try:
        return await relay(exchange, upstream)
    finally:
        watch.stop()
        if upstream.content.at_eof():
            upstream.release()  # keep the upstream connection for the next request
        else:
            upstream.close()  # stop generation (and billing) now


def injection_rules(request: web.Request, route: Route, settings: Settings) -> tuple[Rule, ...]:
    """Rules from the route's config, plus the request header when the config allows it."""
    rules = parse_rules(route.inject) if route.inject else ()
    header = request.headers.get(INJECT_HEADER)
    if header is not None:
        if not settings.allow_inject:
            raise InjectionError(
                f"{INJECT_HEADER} is disabled: start the proxy with --allow-inject"
            )
        rules += parse_rules(header)
    return rules


def unreachable(exchange: Exchange, exc: BaseException) -> web.StreamResponse:
    """No upstream response: answer 502 (504 on timeout) naming the cause; never retry."""
    end = end_reason_for(exc, after_headers=False)
    if isinstance(exc, asyncio.CancelledError):
        exchange.finish(_cancel_reason(exchange))
        raise exc
    timed_out = end is EndReason.IDLE_TIMEOUT
    exchange.status = 504 if timed_out else 502
    etype = "upstream_timeout" if timed_out else "upstream_unreachable"
    cause = f"{type(exc).__name__}: {exc}"
    if len(cause) > MAX_CAUSE_CHARS:
        cause = cause[:MAX_CAUSE_CHARS] + "..."
    if end is not EndReason.IDLE_TIMEOUT:
        end = EndReason.UPSTREAM_UNREACHABLE
    exchange.finish(end, proxy_error=_error(etype, cause))
    upstream = exchange.route.upstream if exchange.route else None
    return json_error(exchange.status, f"sseproxy_{etype}", cause, upstream=upstream)


def _cancel_reason(exchange: Exchange) -> EndReason:
    state = exchange.request.app[STATE]
    return EndReason.PROXY_SHUTDOWN if state.shutting_down else EndReason.CLIENT_DISCONNECTED


async def relay(exchange: Exchange, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """Stream the upstream response downstream chunk by chunk, teeing each chunk to the tap."""
    request = exchange.request
    exchange.timings.headers = time.monotonic()
    exchange.status = upstream.status
    tap = exchange.start_tap(upstream)
    headers = forwardable(upstream.headers)
    if exchange.inject_rules:
        headers.popall("Content-Length", None)  # the drill changes the body's length
    headers["x-sseproxy-request-id"] = exchange.request_id
    if exchange.stream:
        headers["X-Accel-Buffering"] = "no"
        headers["Cache-Control"] = "no-cache"
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    capture = exchange.capture
    watch = exchange.watch
    assert watch is not None
    exchange.writing = True
    try:
        await response.prepare(request)
        exchange.writing = False
        if exchange.inject_rules:
            end, clean = await relay_injected(exchange, upstream, response)
        else:
            # The hot loop: one upstream chunk, written at once, then accounted for. Timings
            # are kept in locals and stored back after the loop (see Timings.settle).
            timings = exchange.timings
            last, max_gap = timings.headers or timings.start, 0.0
            assert exchange.view is not None
            timeline = exchange.view.timeline
            try:
                async for chunk in upstream.content.iter_any():
                    exchange.writing = True
                    try:
                        await response.write(chunk)
                    finally:
                        # Counted even when the write failed: these bytes did arrive.
                        now = watch.last = time.monotonic()
                        if now - last > max_gap:
                            max_gap = now - last
                        last = now
                        deltas = tap.feed(chunk)
                        if deltas:
                            timings.content(now)
                        if len(timeline) < TIMELINE_POINTS:
                            timeline.append((now, len(chunk), deltas))
                        if capture is not None:
                            capture.chunk(chunk, now)
                    exchange.writing = False
            finally:
                timings.settle(last, max_gap)
            # The upstream body ended by its own HTTP framing: end ours the same way. The
            # verdict may still say `interrupted` (no terminal event): that is what the record
            # is for. (Unless the idle watch closed it: then the end is not the upstream's.)
            end, clean = EndReason.UPSTREAM_CLOSED, True
        if watch.expired:
            end, clean = EndReason.IDLE_TIMEOUT, False
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            end = _cancel_reason(exchange)
        elif watch.expired:
            end = EndReason.IDLE_TIMEOUT
        elif exchange.writing:
            end = EndReason.CLIENT_DISCONNECTED
        else:
            end = end_reason_for(exc, after_headers=True)
        exchange.finish(end, http_complete=False)
        _break_downstream(request)
        if isinstance(exc, asyncio.CancelledError):
            raise
        return response
    exchange.finish(end, http_complete=clean)
    if not clean:
        _break_downstream(request)
        return response
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()  # a client that left after the last byte changes nothing
    return response


async def relay_injected(
    exchange: Exchange, upstream: aiohttp.ClientResponse, response: web.StreamResponse
) -> tuple[EndReason, bool]:
    """The drill path: upstream bytes go through the Injector; the tap sees what was written.

    Returns how the stream ended and whether the HTTP body may be ended cleanly.
    """
    tap, capture = exchange.tap, exchange.capture
    assert tap is not None
    ctype = (upstream.headers.get("Content-Type") or "").lower()
    injector = Injector(exchange.inject_rules, tap.dialect, ndjson="ndjson" in ctype)

    async def perform(steps: list[InjectStep]) -> tuple[EndReason, bool] | None:
        for step in steps:
            if isinstance(step, InjectWrite):
                exchange.writing = True
                try:
                    await response.write(step.data)
                finally:
                    exchange.timings.chunk(time.monotonic(), tap.feed(step.data))
                exchange.writing = False
            elif isinstance(step, InjectPause):
                await asyncio.sleep(step.milliseconds / 1000)
            elif isinstance(step, InjectClose):
                return EndReason.UPSTREAM_CLOSED, False
            else:  # a stall: the client sees silence until the idle timeout
                upstream.close()
                await asyncio.sleep(exchange.settings.idle_timeout)
                return EndReason.IDLE_TIMEOUT, False
        return None

    async for chunk in upstream.content.iter_any():
        if exchange.watch is not None:
            exchange.watch.last = time.monotonic()
        if capture is not None:
            capture.chunk(chunk, time.monotonic())
        result = await perform(injector.feed(chunk))
        if result is not None:
            return result
        if injector.done:
            return EndReason.UPSTREAM_CLOSED, True
    return await perform(injector.finish()) or (EndReason.UPSTREAM_CLOSED, True)


def _break_downstream(request: web.Request) -> None:
    """Close the client connection without a clean end, so the client sees the break."""
    transport = request.transport
    if transport is not None and not transport.is_closing():
        transport.close()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Never an open proxy; the proxy's own endpoints only for whom admin.py allows."""
    if request.method == "CONNECT":
        return refuse(request, 405, "sseproxy_method_not_allowed", "CONNECT is not supported")
    if not request.raw_path.startswith("/"):
        # absolute-form ("GET http://host/ HTTP/1.1"): a forward-proxy request, never served
        return refuse(request, 400, "sseproxy_absolute_form", "only origin-form targets")
    refused = admin_refusal(request, request.app[SETTINGS])
    if refused is not None:
        return refused
    return await handler(request)


def refuse(request: web.Request, status: int, etype: str, message: str) -> web.Response:
    exchange = Exchange(request, request.app[SETTINGS])
    exchange.status = status
    exchange.finish(EndReason.END_OF_INPUT, proxy_error=_error(etype[9:], message))
    return json_error(status, etype, message)


async def healthz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = {
        "status": "ok",
        "version": __version__,
        "uptime_s": round(time.monotonic() - state.started, 3),
        "active_streams": state.active,
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    # Rendering every zero-initialised series takes milliseconds: not on the event loop.
    render = request.app[STATE].metrics.render
    body, content_type = await asyncio.to_thread(render, request.headers.get("Accept"))
    response = web.Response(body=body, headers={"Content-Type": content_type})
    response.enable_compression()  # gzip when the scraper accepts it, as Prometheus does
    return response


async def own_not_found(request: web.Request) -> web.Response:
    return json_error(404, "sseproxy_not_found", f"{request.path} is not a sseproxy endpoint")


def create_app(settings: Settings, tracing: Tracing | None = None) -> web.Application:
    """The proxy. `tracing` overrides the one built from `otel_endpoint` (tests use it)."""
    app = web.Application(client_max_size=settings.max_request_body_bytes, middlewares=[guard])
    app[SETTINGS] = settings
    models = [m.strip() for m in settings.metrics_models.split(",") if m.strip()]
    captures = None
    if settings.capture_dir:
        captures = CaptureStore.open(
            CaptureSettings(
                Path(settings.capture_dir),
                settings.capture_max_bytes,
                settings.capture_max_total_bytes,
                settings.capture_request_bodies,
            )
        )
    inspector = Inspector(settings.keep_content)
    if tracing is None and settings.otel_endpoint:
        from .tracing import Tracing

        tracing = Tracing.otlp(settings.otel_endpoint, settings.otel_service_name)
    routes = ["upstream"] if settings.upstream else [route.name for route in settings.routes]
    app[STATE] = ProxyState(Metrics(models, routes), inspector, captures, tracing)
    app.router.add_get(OWN_PREFIX + "healthz", healthz)
    app.router.add_get(OWN_PREFIX + "metrics", metrics)
    app.router.add_get(OWN_PREFIX, inspector.page)
    app.router.add_get(OWN_PREFIX + "events", inspector.feed)
    app.router.add_get(OWN_PREFIX + "streams/{request_id}", inspector.stream)
    app.on_startup.append(inspector.start)
    app.on_shutdown.append(inspector.stop)
    app.router.add_route("*", OWN_PREFIX + "{tail:.*}", own_not_found)
    app.router.add_route("*", "/{tail:.*}", proxy_handler)
    app.cleanup_ctx.append(_client_session)
    app.on_shutdown.append(_mark_shutdown)
    app.on_cleanup.append(_drain_captures)
    return app


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    # No sock_read: aiohttp would cancel and re-arm a timer on every chunk received. The idle
    # timeout is an IdleWatch per request instead, re-armed once per idle period.
    timeout = aiohttp.ClientTimeout(total=None, connect=settings.connect_timeout)
    connector = aiohttp.TCPConnector(limit=0)  # our own limit is max_concurrent_streams
    session = aiohttp.ClientSession(
        timeout=timeout,
        connector=connector,
        auto_decompress=False,  # the client gets the upstream's bytes, compressed or not
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )
    app[STATE].session = session
    yield
    await session.close()


async def _mark_shutdown(app: web.Application) -> None:
    app[STATE].shutting_down = True


async def _drain_captures(app: web.Application) -> None:
    captures = app[STATE].captures
    if captures is not None:
        await captures.drain()
    tracing = app[STATE].tracing
    if tracing is not None:
        await asyncio.to_thread(tracing.shutdown)  # flushes the last spans
