"""Run the proxy until SIGINT/SIGTERM: logging configured once, then aiohttp's runner."""

from __future__ import annotations

import asyncio
import gc

import structlog
from aiohttp import web

from . import __version__, log
from .config import Settings
from .proxy import STATE, create_app, is_loopback

logger = structlog.get_logger("sseproxy")


# Streaming allocates many short-lived tuples and strings; with CPython's default gen0
# threshold of 700 the collector ran so often, over hundreds of live streams' objects, that
# its pauses showed up as delivery latency. Objects alive at startup (modules, config) are
# frozen out of collection; the young generation is collected 70x less often.
GC_THRESHOLDS = (50_000, 20, 20)


def tune_gc() -> None:
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def choose_loop(preference: str) -> str:
    """uvloop when available (it halves the event loop's cost per chunk), else asyncio."""
    if preference in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if preference == "uvloop":
                raise
            return "asyncio"
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return "uvloop"
    return "asyncio"


def run(settings: Settings) -> int:
    log.configure(settings.log_format, settings.log_level)
    loop_name = choose_loop(settings.event_loop)
    app = create_app(settings)

    async def started(app: web.Application) -> None:
        tune_gc()
        logger.info(
            "proxy.started",
            version=__version__,
            listen=settings.listen,
            event_loop=loop_name,
            upstream=settings.public_upstream,
            routes=[r.name for r in settings.routes] if not settings.upstream else None,
        )
        if not is_loopback(settings.host) and not settings.allow_remote:
            logger.warning(
                "proxy.listening_remotely",
                listen=settings.listen,
                hint="every API key sent to this proxy is exposed on that address; "
                "set allow_remote = true to silence this warning",
            )

    async def stopping(app: web.Application) -> None:
        logger.info(
            "proxy.stopping",
            active_streams=app[STATE].active,
            grace_seconds=settings.shutdown_grace,
        )

    async def stopped(app: web.Application) -> None:
        logger.info("proxy.stopped")

    app.on_startup.append(started)
    app.on_shutdown.append(stopping)
    app.on_cleanup.append(stopped)
    web.run_app(
        app,
        host=settings.host,
        port=settings.port,
        access_log=None,  # the request.finished record replaces the access log
        print=None,
        handler_cancellation=True,  # a client that leaves cancels its upstream request at once
        shutdown_timeout=settings.shutdown_grace,
    )
    return 0
