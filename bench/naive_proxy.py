"""The floor: an aiohttp pass-through that reads `iter_any()` and writes each chunk, nothing else.

`python -m bench.naive_proxy PORT UPSTREAM_URL`
"""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web

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


def main() -> None:
    app = web.Application()
    app["upstream"] = sys.argv[2].rstrip("/")
    app.router.add_route("*", "/{tail:.*}", handle)
    app.cleanup_ctx.append(session_ctx)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
