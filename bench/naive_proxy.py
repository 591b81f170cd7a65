"""The floor: an aiohttp pass-through that reads `iter_any()` and writes each chunk, nothing else.

`python -m bench.naive_proxy PORT UPSTREAM_URL [--loop uvloop|asyncio]`

It runs on the event loop sseproxy runs on (uvloop when installed) and listens with the same
backlog, so that what separates the two is sseproxy's own work. It imports nothing from
sseproxy (bench.proxy is standard library only), so its memory is the pass-through's alone.
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
from aiohttp import web

from bench.proxy import has_uvloop, listen_backlog

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


async def handle(request: web.Request) -> web.StreamResponse:
    session: aiohttp.ClientSession = request.app["session"]
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    async with session.request(
        request.method, request.app["upstream"] + request.path_qs, headers=headers, data=body
    ) as upstream:
        out = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        response = web.StreamResponse(status=upstream.status, headers=out)
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
    # An explicit high limit: aiohttp's default of 100 connections queues requests at scale.
    app["session"] = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None),
    )
    yield
    await app["session"].close()


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("port", type=int)
    parser.add_argument("upstream")
    parser.add_argument(
        "--loop", choices=("uvloop", "asyncio"), default="uvloop" if has_uvloop() else "asyncio"
    )
    args = parser.parse_args()
    app = web.Application()
    app["upstream"] = args.upstream.rstrip("/")
    app.router.add_route("*", "/{tail:.*}", handle)
    app.cleanup_ctx.append(session_ctx)
    loop = new_loop(args.loop)
    asyncio.set_event_loop(loop)
    web.run_app(
        app,
        host="127.0.0.1",
        port=args.port,
        print=None,
        access_log=None,
        backlog=listen_backlog(),
        loop=loop,
    )


if __name__ == "__main__":
    main()
