"""The aiohttp application: the proxy handler, the guard, the proxy's own endpoints."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import structlog
from aiohttp import web

from sseproxy import __version__
from sseproxy.capture.format import CaptureSettings
from sseproxy.capture.store import CaptureStore
from sseproxy.config import Settings
from sseproxy.core import Dialect, ErrorInfo, State, Verdict
from sseproxy.inspector.endpoints import Inspector, Retention
from sseproxy.inspector.sessions import SessionRetention
from sseproxy.intercept.destination import ROUTE_NAME as INTERCEPT_ROUTE
from sseproxy.observe.metrics import Metrics
from sseproxy.shell import accelerator
from sseproxy.shell import record as records
from sseproxy.shell.admin import admin_refusal
from sseproxy.shell.admission import Refused, admit, connection_route
from sseproxy.shell.budget import HeldBytes
from sseproxy.shell.errors import describe
from sseproxy.shell.forward import REQUEST_ID_HEADER, break_downstream, forward
from sseproxy.shell.ledger import Ledger, LedgerLimits, Links
from sseproxy.shell.record import PROXY_ERROR, proxy_error
from sseproxy.shell.relay import analyse_backlog
from sseproxy.shell.sinks import deliver, safecall
from sseproxy.shell.state import Answerer, Exchange, ProxyState
from sseproxy.shell.upstream import UpstreamPool
from sseproxy.shell.websocket import handshake as ws_handshake
from sseproxy.shell.websocket.session import session, sessions_go_away
from sseproxy.target import BadTarget, parse_target

if TYPE_CHECKING:
    from sseproxy.observe.tracing import Tracing
log = structlog.get_logger("sseproxy")

SETTINGS = web.AppKey("settings", Settings)
STATE: web.AppKey[ProxyState] = web.AppKey("state")
LEDGER = web.AppKey("ledger", Ledger)
OWN_PREFIX = "/_sseproxy/"


def own_response(
    request_id: str, status: int, etype: str, message: str, **extra: Any
) -> web.Response:
    """Every response the proxy makes itself: a JSON error naming why, and the request id."""
    body = {"error": {"type": f"sseproxy_{etype}", "message": message, **extra}}
    return web.Response(
        status=status,
        body=orjson.dumps(body),
        content_type="application/json",
        headers={REQUEST_ID_HEADER: request_id},
    )


async def send_own(request: web.Request, x: Exchange, refused: Refused) -> web.StreamResponse:
    """Answer `refused` and end the response before the record is written."""
    p = x.progress
    p.status, p.end, p.answered_by = refused.status, refused.end, Answerer.PROXY
    p.proxy_error = proxy_error(refused.etype, refused.message)
    response = own_response(
        x.facts.request_id, refused.status, refused.etype, refused.message, **refused.extra
    )
    response.headers.update(refused.headers)
    if refused.close:
        response.force_close()
    try:
        await response.prepare(request)
        await response.write_eof()
    except (OSError, RuntimeError):
        pass  # the client left; the record says what it was told
    return response


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    state, settings = request.app[STATE], request.app[SETTINGS]
    x = Exchange(request)
    try:
        try:
            x.facts = await admit(request, x, state, settings)
            if ws_handshake.asks_for_websocket(request):
                ws_handshake.check(request)  # before any upstream is contacted
                return await session(request, x, state, settings, request.app[LEDGER])
            return await forward(request, x, state, settings)
        except Refused as refused:
            return await send_own(request, x, refused)
        except asyncio.CancelledError:
            x.progress.cancelled(state.shutting_down)
            raise
        except Exception as exc:  # a bug of ours: still one record, and the client sees a break
            x.progress.end = PROXY_ERROR
            x.progress.proxy_error = proxy_error("internal_error", describe(exc))
            safecall(state, "log", lambda: log.exception("proxy.internal_error"))
            break_downstream(request)
            return web.Response(status=500)
    finally:
        try:
            tap = x.progress.tap
            if tap is not None and tap.backlog:  # after the client's response has ended
                await analyse_backlog(tap, lambda: state.shutting_down, state.analysis)
            if not x.progress.upgraded:
                await state.steps.wait()  # as many records at once (clients that left together)
        finally:  # written even when cancelled meanwhile
            if not x.progress.upgraded:  # a session wrote its own records
                finish(state, x, settings.content_timeout, request.app[LEDGER])
            release(state, x)


def finish(
    state: ProxyState,
    x: Exchange,
    content_timeout: float | None = None,
    ledger: Ledger | None = None,
) -> None:
    """Build the record once, after the client's response has ended, and hand it to sinks;
    `ledger`: link the request to a stream it resumes or repeats (the proxy's own answers
    continue nothing)."""
    try:
        verdict, pacing = records.verdict_of(x.facts, x.progress, content_timeout)
        links = link(state, ledger, x, verdict) if ledger is not None else Links()
        if links.anomalies:
            verdict = records.with_anomalies(verdict, links.anomalies)
        record, rendered = records.build_rendered(x.facts, x.progress, verdict, pacing, links)
        if verdict.error is not None and isinstance(record.get("error"), Mapping):
            # tracing reads the error message from the verdict: the redacted one
            verdict = verdict.replace(error=ErrorInfo(**record["error"]))
    except Exception as exc:  # never lose the record: a minimal one says what is known
        verdict = Verdict(dialect=Dialect.SSE, state=State.UNCONFIRMED)
        record, rendered = records.fallback(x.facts, x.progress, exc), None
    deliver(state, x.facts, x.progress, verdict, record, rendered)


def link(state: ProxyState, ledger: Ledger, x: Exchange, verdict: Verdict) -> Links:
    """Link a resumed or re-sent request to its original (the ledger keeps this one too); a
    failure here costs the link, never the record. The metrics count links from the record."""
    try:
        ended = records.ended(x.facts, x.progress, verdict, ledger.keep_text)
        links = ledger.link(ended, time.monotonic())
    except Exception:
        safecall(state, "log", lambda: log.exception("proxy.ledger_error"))
        return Links()
    return links


# A response whose client made the proxy's writes wait this long in all held its bytes for
# long enough to count among the ends after which memory is given back (a client that keeps up
# still waits a few milliseconds for a large stream).
HELD_CLIENT_SECONDS = 1.0


def release(state: ProxyState, x: Exchange) -> None:
    """Give back what the request held, on every path."""
    if x.slot:
        x.slot = False
        state.active -= 1
        state.metrics.active.dec()
    state.body_bytes -= x.body_bytes
    x.body_bytes = 0
    state.inspector.active.pop(x.facts.request_id, None)
    state.inspector.live_sessions.pop(x.facts.request_id, None)  # its row stops moving on
    if x.progress.view is not None:
        x.progress.view.tap = None  # the ring keeps views, never a finished stream's tap
    delivery = x.progress.delivery
    if delivery is not None and delivery.client_wait >= HELD_CLIENT_SECONDS:
        # A client that stopped reading had its bytes held here: once a burst of such responses
        # has ended, the memory goes back to the system (shell/memory.py).
        state.memory.ended()


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
    """Never an open proxy; the proxy's own endpoints only for whom admin.py allows; every
    target, whatever it holds, answered by the proxy itself (never by aiohttp's text 404)."""
    if not request.raw_path.startswith(OWN_PREFIX):  # the proxy's own answers never wait
        # A burst of requests is taken in over several loop iterations.
        await request.app[STATE].steps.wait()
    if request.method == "CONNECT":
        return await refuse(request, 405, "method_not_allowed", "CONNECT is not supported")
    if not request.raw_path.startswith("/"):
        # absolute-form ("GET http://host/ HTTP/1.1"): a forward-proxy request, never served
        return await refuse(request, 400, "absolute_form", "only origin-form targets")
    try:
        parse_target(request.raw_path)  # before the router: a decoded newline matches no route
    except BadTarget as bad:
        return await refuse(request, 400, "bad_target", str(bad))
    if connection_route(request) is not None:
        # Intercepted: every path, /_sseproxy/ too, belongs to the real host.
        return await proxy_handler(request)
    refused = admin_refusal(request, request.app[SETTINGS])
    if refused is not None:
        return refused
    if request.match_info.http_exception is not None:  # the router found no handler
        return await refuse(request, 404, "not_found", "no handler for this target")
    return await handler(request)


async def refuse(request: web.Request, status: int, etype: str, message: str) -> web.StreamResponse:
    x = Exchange(request)
    try:
        return await send_own(request, x, Refused(status, etype, message))
    finally:
        finish(request.app[STATE], x)


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


async def own_not_found(request: web.Request) -> web.StreamResponse:
    path = request.raw_path.partition("?")[0]
    return await refuse(request, 404, "not_found", f"{path} is not a sseproxy endpoint")


def create_app(
    settings: Settings,
    tracing: Tracing | None = None,
    environ: Mapping[str, str] | None = None,
) -> web.Application:
    """The proxy. `tracing` overrides the one built from `otel_endpoint` (tests use it);
    `environ` supplies HTTPS_PROXY / HTTP_PROXY / NO_PROXY for upstream connections (the
    process's environment, passed in by whoever starts the proxy; none: direct)."""
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
    retention = Retention(
        settings.inspector_streams,
        settings.inspector_stream_bytes,
        settings.inspector_total_bytes,
        settings.inspector_events,
        settings.inspector_chars,
    )
    sessions = SessionRetention(
        settings.inspector_sessions, settings.inspector_session_messages, settings.inspector_chars
    )
    inspector = Inspector(
        settings.keep_content, retention=retention, captures=captures, session_retention=sessions
    )
    if tracing is None and settings.otel_endpoint:
        from sseproxy.observe.tracing import Tracing

        tracing = Tracing.otlp(settings.otel_endpoint, settings.otel_service_name)
    routes = ["upstream"] if settings.upstream else [route.name for route in settings.routes]
    if settings.intercept_listen:
        routes.append(INTERCEPT_ROUTE)
    limits = LedgerLimits(settings.resume_ledger_streams, settings.resume_ledger_seconds)
    app[LEDGER] = Ledger(limits, settings.keep_content)
    app[STATE] = ProxyState(
        Metrics(models, routes),
        inspector,
        captures,
        tracing,
        held=HeldBytes(settings.max_held_bytes),
        ws_held=HeldBytes(settings.max_ws_held_bytes),
    )
    app.router.add_get(OWN_PREFIX + "healthz", healthz)
    app.router.add_get(OWN_PREFIX + "metrics", metrics)
    app.router.add_get(OWN_PREFIX, inspector.page)
    app.router.add_get(OWN_PREFIX + "events", inspector.feed)
    app.router.add_get(OWN_PREFIX + "streams/{request_id}", inspector.stream)
    app.router.add_get(OWN_PREFIX + "sessions/{session_id}", inspector.session)
    app.router.add_get(OWN_PREFIX + "captures/{request_id}/{kind}", inspector.capture_file)
    app.on_startup.append(inspector.start)
    app.on_startup.append(_detect_accelerator)
    app.on_shutdown.append(inspector.stop)
    app.router.add_route("*", OWN_PREFIX + "{tail:.*}", own_not_found)
    app.router.add_route("*", "/{tail:.*}", proxy_handler)
    app.cleanup_ctx.append(functools.partial(_upstream_pool, environ=environ or {}))
    app.on_shutdown.append(_mark_shutdown)
    app.on_cleanup.append(_drain_captures)
    return app


async def _upstream_pool(
    app: web.Application, *, environ: Mapping[str, str]
) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pool = UpstreamPool(
        connect_timeout=settings.connect_timeout,
        environ=environ,
        ca_file=settings.upstream_ca_file or None,
    )
    app[STATE].pool = pool
    yield
    await pool.close()


async def _detect_accelerator(app: web.Application) -> None:
    await accelerator.detect()  # once per process, against the running aiohttp


async def _mark_shutdown(app: web.Application) -> None:
    app[STATE].shutting_down = True
    sessions_go_away(app[STATE], now=False)  # 1001 to both peers of every session between turns


async def _drain_captures(app: web.Application) -> None:
    captures = app[STATE].captures
    if captures is not None:
        await captures.drain()
    tracing = app[STATE].tracing
    if tracing is not None:
        await asyncio.to_thread(tracing.shutdown)  # flushes the last spans
