"""Benchmark upstream: streams whose events carry their send time (CLOCK_MONOTONIC, ns).

`python -m bench.upstream PORT`. The query string says what to send:
`events`, `interval_ms`, `per_write` (events per socket write), `dialect` (chat, anthropic,
responses). Every stream ends with the dialect's terminal signal.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from aiohttp import web

from bench.proxy import listen_backlog

TEXT = "流式"  # a little CJK in every event, as real answers have


def chat_event(i: int) -> bytes:
    # The send time rides in `obfuscation`, the random padding string OpenAI adds to every
    # chunk: the one field that varies per event in real streams besides the text.
    body = (
        '{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
        f'"model":"bench","choices":[{{"index":0,"delta":{{"content":"{TEXT} {i}"}},'
        f'"logprobs":null,"finish_reason":null}}],"obfuscation":"t{time.monotonic_ns()}"}}'
    )
    return b"data: " + body.encode() + b"\n\n"


def chat_end() -> bytes:
    end = (
        '{"id":"chatcmpl-bench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        f'"t":{time.monotonic_ns()}}}'
    )
    return b"data: " + end.encode() + b"\n\ndata: [DONE]\n\n"


def anthropic_event(i: int) -> bytes:
    data = json.dumps(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": f"{TEXT} {i}"},
            "t": time.monotonic_ns(),
        }
    )
    return b"event: content_block_delta\ndata: " + data.encode() + b"\n\n"


def anthropic_start() -> bytes:
    start = {"type": "message_start", "message": {"id": "m", "model": "bench", "usage": {}}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    return (
        b"event: message_start\ndata: " + json.dumps(start).encode() + b"\n\n"
        b"event: content_block_start\ndata: " + json.dumps(block).encode() + b"\n\n"
    )


def anthropic_end() -> bytes:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "t": time.monotonic_ns(),
    }
    return (
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b"event: message_delta\ndata: " + json.dumps(delta).encode() + b"\n\n"
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )


def responses_event(i: int) -> bytes:
    data = json.dumps(
        {
            "type": "response.output_text.delta",
            "sequence_number": i + 1,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": f"{TEXT} {i}",
            "t": time.monotonic_ns(),
        }
    )
    return b"event: response.output_text.delta\ndata: " + data.encode() + b"\n\n"


def responses_start() -> bytes:
    data = {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "model": "b"}}
    return b"event: response.created\ndata: " + json.dumps(data).encode() + b"\n\n"


def responses_end() -> bytes:
    data = {
        "type": "response.completed",
        "response": {"id": "r", "status": "completed"},
        "t": time.monotonic_ns(),
    }
    return b"event: response.completed\ndata: " + json.dumps(data).encode() + b"\n\n"


DIALECTS = {
    "chat": (lambda: b"", chat_event, chat_end),
    "anthropic": (anthropic_start, anthropic_event, anthropic_end),
    "responses": (responses_start, responses_event, responses_end),
}


async def stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    q = request.query
    events = int(q.get("events", "100"))
    interval = float(q.get("interval_ms", "0")) / 1000
    per_write = int(q.get("per_write", "1"))
    start, event, end = DIALECTS[q.get("dialect", "chat")]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        first = start()
        if first:
            await response.write(first)
        for i in range(0, events, per_write):
            await response.write(b"".join(event(j) for j in range(i, min(i + per_write, events))))
            if interval:
                await asyncio.sleep(interval)
        await response.write(end())
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client (or the proxy, for a client that left) closed the stream
    return response


def main() -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stream)
    # The bench's burst scenario must not overflow the upstream's accept queue either.
    web.run_app(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        print=None,
        access_log=None,
        backlog=listen_backlog(),
    )


if __name__ == "__main__":
    main()
