"""Load generator: N concurrent streams, each event's delivery latency from its embedded send time.

`python -m bench.loadgen URL --streams N --events E [--interval-ms I] [--per-write W]
[--dialect chat|anthropic|responses] [--spread SECONDS] [--body-kb K]` prints one JSON object.

`--body-kb K`: each request sends a JSON body of about K KB shaped as a coding agent's turn
(Codex sends ~40 KB to the Responses API: `model`, `instructions`, an `input` list of
messages and tool calls, a `tools` list); without it, `{"stream": true}`.
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


def agent_body(kb: int) -> bytes:
    """A Responses request of about `kb` KB, as Codex sends one turn (shape from Codex's
    requests to /v1/responses: instructions, input messages, function calls and outputs,
    function tools with JSON Schema parameters). Deterministic: every request the same."""
    tools = [
        {
            "type": "function",
            "name": name,
            "description": f"{name}: runs a {name} step in the workspace and returns its output."
            * 3,
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "array", "items": {"type": "string"}},
                    "workdir": {"type": "string", "description": "working directory"},
                    "timeout_ms": {"type": "number", "description": "timeout in ms"},
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        }
        for name in ("shell", "apply_patch", "update_plan", "view_image", "read_file")
    ]
    line = 'fn main() {\n    println!("hello, world");\n}\n// 流式 note\n'
    items: list[dict[str, object]] = []
    body: dict[str, object] = {
        "model": "gpt-5-codex",
        "instructions": "You are a coding agent running in a terminal. " * 40,
        "input": items,
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a4c2-bench-0000-0000-000000000000",
    }
    turn = 0
    while len(json.dumps(body)) < kb * 1000:
        turn += 1
        items.append(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"turn {turn}: fix the build " * 8}],
            }
        )
        call = f"call_{turn:04d}"
        items.append(
            {
                "type": "function_call",
                "name": "shell",
                "arguments": json.dumps({"command": ["cat", f"src/m{turn}.rs"]}),
                "call_id": call,
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": call,
                "output": json.dumps({"output": line * 12, "metadata": {"exit_code": 0}}),
            }
        )
    return json.dumps(body, ensure_ascii=False).encode()


class Tally:
    def __init__(self) -> None:
        self.latencies_ns: list[int] = []
        self.ttfb_ns: list[int] = []
        self.events = 0
        self.bytes = 0
        self.completed = 0
        self.failed = 0


async def one_stream(
    session: aiohttp.ClientSession, url: str, delay: float, tally: Tally, body: bytes
) -> None:
    await asyncio.sleep(delay)
    start = time.monotonic_ns()
    buffer = b""
    try:
        async with session.post(
            url, data=body, headers={"Content-Type": "application/json"}
        ) as resp:
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
    body = agent_body(args.body_kb) if args.body_kb else b'{"stream": true}'
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    started = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(
            *(
                one_stream(session, url, args.spread * i / args.streams, tally, body)
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
    parser.add_argument("--body-kb", type=int, default=0, help="an agent-shaped body of ~K KB")
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
