"""Run the proxy until SIGINT/SIGTERM: listen, serve, then stop on our own clock.

aiohttp's `run_app` applies its shutdown timeout twice (wait for handlers, then wait again
after cancelling them), so streams were cut at about twice the grace and Docker's stop timeout
killed the process before it wrote its records. Here the first signal stops accepting and gives
in-flight requests `shutdown_grace` seconds from that signal; then every remaining handler is
cancelled (it writes its record as `proxy_shutdown`) and the process exits. A second signal cuts
at once. WebSocket sessions are never cut without a close frame: at the first signal each one
between turns is sent close 1001 ("going away") both ways, each with a turn open when its turns
end, and at the cut every one still open, with `SESSION_CLOSE_WAIT` for the handshakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from sseproxy import __version__
from sseproxy.config import Settings, split_listen
from sseproxy.observe import log
from sseproxy.shell import accelerator, admin
from sseproxy.shell.app import OWN_PREFIX, STATE, create_app, is_loopback
from sseproxy.shell.websocket.session import sessions_go_away

if TYPE_CHECKING:
    from sseproxy.intercept.listener import InterceptListener
logger = structlog.get_logger("sseproxy")

# Streaming allocates many short-lived tuples and strings; with CPython's default gen0
# threshold of 700 the collector ran so often, over hundreds of live streams' objects, that
# its pauses showed up as delivery latency. Objects alive at startup (modules, config) are
# frozen out of collection; the young generation is collected 14x less often. (At 50,000 one
# young collection paused the loop 14-40 ms when hundreds of requests or sessions arrived
# together, and many short requests cost 13 % more CPU and 19 % more peak RSS than at 10,000:
# `bench.proxy` r, `bench.fairness`.)
GC_THRESHOLDS = (10_000, 20, 20)
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
# Linux's default since 5.4; used where the system's value cannot be read.
DEFAULT_BACKLOG = 4096
# How long cancelled handlers get to write their records before the process goes on exiting.
CUT_WAIT = 1.0
# How long WebSocket peers get to answer the proxy's close 1001 at the cut (a round trip to a
# provider is ~0.1-0.3 s); the grace, this and CUT_WAIT together stay within Docker's 10 s.
SESSION_CLOSE_WAIT = 0.5
EXIT_CANNOT_LISTEN = 1
EXIT_CANNOT_OPEN_LOG = 2  # as a configuration error

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def tune_gc() -> None:
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def choose_loop(preference: str) -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """uvloop when available (it halves the event loop's cost per chunk), else asyncio."""
    if preference in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if preference == "uvloop":
                raise
            return "asyncio", None
        return "uvloop", uvloop.new_event_loop
    return "asyncio", None


def system_backlog(path: Path = SOMAXCONN) -> int:
    """The kernel's cap on a listen queue: asking for more is silently truncated to it."""
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return DEFAULT_BACKLOG
    return value if value > 0 else DEFAULT_BACKLOG


def listen_backlog(settings: Settings) -> int:
    """A burst of connects must wait in the accept queue, not in SYN retransmission (~1 s).

    aiohttp's default of 128 overflowed when a few hundred streams started at once.
    """
    return settings.backlog if settings.backlog > 0 else system_backlog()


class InFlight:
    """The handler tasks running now, so that shutdown can wait for them and then cut them."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.idle = asyncio.Event()
        self.idle.set()

    def middleware(self) -> Middleware:
        @web.middleware
        async def track(request: web.Request, handler: Handler) -> web.StreamResponse:
            task = asyncio.current_task()
            if task is None:  # pragma: no cover (aiohttp runs every handler in a task)
                return await handler(request)
            self.tasks.add(task)
            self.idle.clear()
            try:
                return await handler(request)
            finally:
                self.tasks.discard(task)
                if not self.tasks:
                    self.idle.set()

        return track

    def cancel_all(
        self, spare: set[asyncio.Task[Any]] | frozenset[asyncio.Task[Any]] = frozenset()
    ) -> int:
        """Cancel every handler but those in `spare` and those already cancelled (a second
        cancel would interrupt the records they are writing); returns how many."""
        cut = [task for task in self.tasks if task not in spare and not task.cancelling()]
        for task in cut:
            task.cancel()
        return len(cut)


class Signals:
    """SIGTERM/SIGINT as events: the first asks for a graceful stop, the second for a cut."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.count = 0
        self.first_at = 0.0
        self.first = asyncio.Event()
        self.again = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.received)
            except NotImplementedError:  # pragma: no cover (Windows' loops have no handlers)
                signal.signal(sig, lambda *_: loop.call_soon_threadsafe(self.received))

    def received(self) -> None:
        self.count += 1
        if self.count == 1:
            self.first_at = self.loop.time()
            self.first.set()
        else:
            self.again.set()


class Runner(web.AppRunner):
    """An AppRunner whose on_shutdown hooks run once: we run them at the first signal (they end
    the inspector's feeds and mark the state as shutting down), `cleanup()` would run them again.
    """

    __slots__ = ("_shut_down",)

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._shut_down = False

    async def shutdown(self) -> None:
        if not self._shut_down:
            self._shut_down = True
            await super().shutdown()


def own_urls(host: str, port: int) -> dict[str, str]:
    """Where the inspector, metrics and healthz answer, for the startup line. A wildcard
    listen address is reached on loopback (the one address whose Host needs no token)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    base = f"http://{f'[{host}]' if ':' in host else host}:{port}{OWN_PREFIX}"
    return {"inspector": base, "metrics": base + "metrics", "healthz": base + "healthz"}


def run(settings: Settings, color: bool = True) -> int:
    """`color=False`: no colours on a terminal either (NO_COLOR, read by the command line).
    With `log_file` the records are appended to that file (kept open until the last record
    is written) instead of stdout."""
    with contextlib.ExitStack() as stack:
        stream = None
        if settings.log_file:
            try:
                stream = stack.enter_context(open(settings.log_file, "a", encoding="utf-8"))
            except OSError as exc:
                reason = exc.strerror or str(exc)
                print(
                    f"sseproxy: cannot open log_file {settings.log_file!r}: {reason}",
                    file=sys.stderr,
                )
                return EXIT_CANNOT_OPEN_LOG
        log.configure(
            settings.log_format,
            settings.log_level,
            stream=stream,
            max_queue_bytes=settings.max_log_queue_bytes,
            color=color,
        )
        loop_name, loop_factory = choose_loop(settings.event_loop)
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                return runner.run(serve(settings, loop_name))
        finally:
            log.finish()  # the records still queued for the output, `proxy.stopped` last; bounded


async def serve(settings: Settings, loop_name: str) -> int:
    """Listen, serve until a signal, stop. Returns the process's exit code."""
    app = create_app(settings, environ=os.environ)  # egress proxy variables, if any
    inflight = InFlight()
    app.middlewares.insert(0, inflight.middleware())
    runner = Runner(
        app,
        access_log=None,  # the request.finished record replaces the access log
        handler_cancellation=True,  # a client that leaves cancels its upstream request at once
        # The request body as the client sent it: aiohttp would inflate a gzip (or br) body and
        # the proxy would forward the inflated bytes under the client's Content-Encoding.
        auto_decompress=False,
        shutdown_timeout=CUT_WAIT,  # only idle connections are left when cleanup() runs
    )
    signals = Signals(asyncio.get_running_loop())
    await runner.setup()
    backlog = listen_backlog(settings)
    site = web.TCPSite(runner, settings.host, settings.port, backlog=backlog)
    try:
        await site.start()
    except OSError as exc:
        # asyncio's message repeats the address; the errno's text alone reads as one line.
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"sseproxy: cannot listen on {settings.listen}: {reason}", file=sys.stderr)
        await runner.cleanup()
        return EXIT_CANNOT_LISTEN
    intercept: Intercept | None = None
    if settings.intercept_listen:
        try:
            intercept = await start_intercept(settings, runner, backlog)
        except Exception as exc:  # CAError, OSError: said in one line
            print(f"sseproxy: cannot start intercept mode: {exc}", file=sys.stderr)
            await runner.cleanup()
            return EXIT_CANNOT_LISTEN
    tune_gc()
    announce(settings, loop_name, backlog, runner.addresses[0][1], intercept)
    await signals.first.wait()
    if intercept is not None and intercept.listener.server is not None:
        intercept.listener.server.close()  # no new CONNECTs
    ending = intercept.listener.stop if intercept is not None else None
    await stop(runner, site, inflight, signals, settings.shutdown_grace, ending)
    return 0


class Intercept:
    """The running intercept listener and what `proxy.started` says of it."""

    def __init__(self, listener: InterceptListener, address: str, ca_file: str) -> None:
        self.listener = listener
        self.address = address
        self.ca_file = ca_file


async def start_intercept(settings: Settings, runner: web.AppRunner, backlog: int) -> Intercept:
    """The CA (made on first use, off the loop), then the listener, whose intercepted
    connections are given to the same aiohttp server as the reverse proxy's."""
    from sseproxy.intercept.ca import Leaves, ca_directory, load_or_create
    from sseproxy.intercept.listener import InterceptListener, ListenerSettings
    from sseproxy.shell.upstream.egress import ProxySettings

    authority = await asyncio.to_thread(load_or_create, ca_directory(settings.ca_dir, os.environ))
    server = runner.server
    assert server is not None  # set up before this is called
    listener = InterceptListener(
        # an IPv6 host is named in brackets ("[::1]"), a CONNECT target's address without
        ListenerSettings(
            frozenset(h.strip("[]") for h in settings.intercepted_hosts),
            settings.connect_timeout,
            max_tunnels=settings.max_concurrent_streams,
            # tunnels reach their hosts as the upstream leg does: through its egress proxy
            proxies=ProxySettings.from_environ(os.environ),
            ca_file=settings.upstream_ca_file or None,
        ),
        Leaves(authority),
        server,
    )
    host, port = split_listen(settings.intercept_listen)
    try:
        bound = await listener.start(host, port, backlog)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {settings.intercept_listen}") from exc
    shown = f"[{host}]" if ":" in host else host
    return Intercept(listener, f"{shown}:{bound}", str(authority.cert_path))


def announce(
    settings: Settings, loop_name: str, backlog: int, port: int, intercept: Intercept | None = None
) -> None:
    """`proxy.started`, then a warning for each setting an operator would otherwise find
    out about from a refused request."""
    logger.info(
        "proxy.started",
        version=__version__,
        listen=settings.listen,
        **own_urls(settings.host, port),
        event_loop=loop_name,
        backlog=backlog,
        relay_accelerator=accelerator.enabled(),  # detected at the app's startup
        relay_trailers=accelerator.trailers_enabled(),  # it can end a response with trailers
        upstream=settings.public_upstream,
        routes=[r.name for r in settings.routes] if not settings.upstream else None,
        **(
            {
                "intercept_listen": intercept.address,
                "intercept_ca": intercept.ca_file,
                "intercept_hosts": sorted(settings.intercepted_hosts),
            }
            if intercept is not None
            else {}
        ),
    )
    if not is_loopback(settings.host) and not settings.allow_remote:
        logger.warning(
            "proxy.listening_remotely",
            listen=settings.listen,
            hint="every API key sent to this proxy is exposed on that address; "
            "set allow_remote = true to silence this warning",
        )
    # admin.py refuses every /_sseproxy/ endpoint but healthz beyond loopback without a token
    if not admin.is_loopback(admin.host_name(settings.host)) and not settings.admin_token:
        logger.warning(
            "proxy.admin_token_missing",
            listen=settings.listen,
            hint="the inspector and /_sseproxy/metrics answer 403 on this address: set "
            "SSEPROXY_ADMIN_TOKEN (admin_token) and send it as `Authorization: Bearer <token>` "
            "or ?token=; healthz stays open",
        )


async def stop(
    runner: Runner,
    site: web.TCPSite,
    inflight: InFlight,
    signals: Signals,
    grace: float,
    also: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Stop accepting, wait up to `grace` from the first signal, cut what is left, clean up.
    `also`: ended with the cut (the intercept listener's tunnels), before `proxy.stopped`."""
    loop = asyncio.get_running_loop()
    await site.stop()  # no new connections
    if runner.server is not None:
        runner.server.pre_shutdown()  # keep-alive connections close after their current request
    app = runner.app
    logger.info(
        "proxy.stopping",
        active_streams=app[STATE].active,
        in_flight=len(inflight.tasks),
        grace_seconds=grace,
    )
    # on_shutdown: mark the state as shutting down (WebSocket sessions between turns close with
    # 1001), end inspector feeds
    await runner.shutdown()
    remaining = signals.first_at + grace - loop.time()
    if not signals.again.is_set() and remaining > 0:
        await first_of(inflight.idle.wait(), signals.again.wait(), timeout=remaining)
    cutting = await cut_remaining(app, inflight)
    if also is not None:
        await also()
    await runner.cleanup()  # close idle connections, on_cleanup: drain captures, close session
    logger.info("proxy.stopped", cut_streams=len(cutting), second_signal=signals.again.is_set())


async def cut_remaining(app: web.Application, inflight: InFlight) -> set[asyncio.Task[Any]]:
    """The grace is over: every WebSocket session still open is sent close 1001 both ways
    and gets `SESSION_CLOSE_WAIT` for the closing handshakes; every other handler is cancelled
    at once, then whatever is left. Each handler writes its records (`proxy_shutdown`) as it
    unwinds, within `CUT_WAIT`. Returns the handlers that were still running."""
    running = set(inflight.tasks)
    if not running:
        return running
    closing = sessions_go_away(app[STATE], now=True)
    if inflight.cancel_all(spare=closing) < len(running):
        await first_of(inflight.idle.wait(), timeout=SESSION_CLOSE_WAIT)
    inflight.cancel_all()  # sessions whose peers did not answer in time
    await first_of(inflight.idle.wait(), timeout=CUT_WAIT)
    return running


async def first_of(*aws: Awaitable[Any], timeout: float) -> None:
    """Wait until the first of `aws` is done or `timeout` passes; cancel the others."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
