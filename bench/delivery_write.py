"""The cost of metering client writes: `response.write` vs `ClientDelivery.write`.

One aiohttp server writes small SSE chunks to a client on loopback that reads as fast as it
can (the path where no write waits); the figure is process CPU time per write, client
included, median of interleaved rounds. Run by hand: `python -m bench.delivery_write`.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from aiohttp import ClientSession, web

from sseproxy.core import Dialect, StreamTap
from sseproxy.shell.delivery import ClientDelivery

WRITES = 100_000
ROUNDS = 7
CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n'


async def main() -> None:
    results: dict[str, list[float]] = {"raw": [], "delivery": []}

    async def handler(request: web.Request) -> web.StreamResponse:
        mode = request.query["mode"]
        response = web.StreamResponse()
        await response.prepare(request)
        delivery = ClientDelivery(request, response, StreamTap(Dialect.OPENAI_CHAT))
        write = delivery.write if mode == "delivery" else response.write
        started = time.process_time()
        for _ in range(WRITES):
            await write(CHUNK)
        results[mode].append((time.process_time() - started) / WRITES * 1e9)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = site.name
    async with ClientSession() as session:
        for _ in range(ROUNDS):
            for mode in results:
                async with session.get(f"{url}/?mode={mode}") as resp:
                    async for _ in resp.content.iter_any():
                        pass
    await runner.cleanup()
    for mode, figures in results.items():
        print(f"{mode:9} {statistics.median(figures):7.0f} ns CPU per write (client included)")


if __name__ == "__main__":
    asyncio.run(main())
