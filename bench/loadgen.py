"""Load generator: N concurrent streams, each event's delivery latency from its embedded send time.

`python -m bench.loadgen URL --streams N --events E [--interval-ms I] [--per-write W]
[--dialect chat|anthropic|responses] [--spread SECONDS]` prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp

# Where the upstream put each event's send time: `"t":N}` or `"obfuscation":"tN"`.
SEND_TIME = ((b'"t":', b"}"), (b'"obfuscation":"t', b'"'))
TERMINALS = (b"data: [DONE]", b"event: message_stop", b"event: response.completed")


class Tally:
    def __init__(self) -> None:
        self.latencies_ns: list[int] = []
        self.ttfb_ns: list[int] = []
        self.events = 0
        self.bytes = 0
        self.completed = 0
        self.failed = 0


async def one_stream(session: aiohttp.ClientSession, url: str, delay: float, tally: Tally) -> None:
    await asyncio.sleep(delay)
    start = time.monotonic_ns()
    buffer = b""
    try:
        async with session.post(url, data=b'{"stream": true}') as resp:
            tally.ttfb_ns.append(time.monotonic_ns() - start)
            async for chunk in resp.content.iter_any():
                now = time.monotonic_ns()
                tally.bytes += len(chunk)
                buffer += chunk
                cut = buffer.rfind(b"\n\n")
                if cut < 0:
                    continue
                complete, buffer = buffer[:cut], buffer[cut + 2 :]
                tally.events += complete.count(b"\n\n") + 1
                for marker, closer in SEND_TIME:
                    pos = complete.find(marker)
                    while pos >= 0:
                        start = pos + len(marker)
                        end = complete.find(closer, start)
                        tally.latencies_ns.append(now - int(complete[start:end]))
                        pos = complete.find(marker, end)
                last = complete.rfind(b"\n\n")
                tail = complete[last + 2 :] if last >= 0 else complete
                if tail.startswith(TERMINALS):
                    tally.completed += 1
    except aiohttp.ClientError:
        tally.failed += 1


def percentile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] / 1e6


async def run(args: argparse.Namespace) -> dict[str, float]:
    query = (
        f"?events={args.events}&interval_ms={args.interval_ms}"
        f"&per_write={args.per_write}&dialect={args.dialect}"
    )
    path = {
        "chat": "/v1/chat/completions",
        "anthropic": "/v1/messages",
        "responses": "/v1/responses",
    }
    url = args.url.rstrip("/") + path[args.dialect] + query
    tally = Tally()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    started = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(
            *(
                one_stream(session, url, args.spread * i / args.streams, tally)
                for i in range(args.streams)
            )
        )
    elapsed = time.monotonic() - started
    return {
        "streams": args.streams,
        "completed": tally.completed,
        "failed": tally.failed,
        "events": tally.events,
        "bytes": tally.bytes,
        "seconds": elapsed,
        "events_per_s": tally.events / elapsed,
        "mb_per_s": tally.bytes / elapsed / 1e6,
        "ttfb_p50_ms": percentile(tally.ttfb_ns, 0.5),
        "ttfb_p99_ms": percentile(tally.ttfb_ns, 0.99),
        "lat_p50_ms": percentile(tally.latencies_ns, 0.5),
        "lat_p90_ms": percentile(tally.latencies_ns, 0.9),
        "lat_p99_ms": percentile(tally.latencies_ns, 0.99),
        "lat_max_ms": percentile(tally.latencies_ns, 1.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=0)
    parser.add_argument("--per-write", type=int, default=1)
    parser.add_argument("--dialect", default="chat")
    parser.add_argument("--spread", type=float, default=0.0)
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
