"""Retries as the agents make them, through the proxy (issue 30): Codex sending a cut turn
again with its `client_metadata` in a new key order (`same_meaning`), Claude Code sending a
turn again without `stream` after an `overloaded_error` (`without_stream`), Codex falling back
from the Responses WebSocket to `POST /v1/responses` (`websocket_fallback`). Request shapes
from tests/data/agent_headers/ (codex.json, claude-code.json); `same_body` is in
test_resume.py."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.agent_headers import AGENTS
from tests.integration.fake_upstream import Close, Script, Send
from tests.integration.ws_upstream import WsUpstream

SSE = {"Content-Type": "text/event-stream"}
CODEX, CLAUDE = AGENTS["codex"], AGENTS["claude-code"]


def reordered(obj: Any) -> Any:
    """Every object's keys in reverse order, as a hash map may write them."""
    if isinstance(obj, dict):
        return {k: reordered(v) for k, v in reversed(obj.items())}
    return obj


def responses_event(etype: str, n: int, **fields: Any) -> bytes:
    payload = {"type": etype, "sequence_number": n, **fields}
    return f"event: {etype}\ndata: {json.dumps(payload)}\n\n".encode()


CREATED = responses_event("response.created", 0, response={"id": "resp_1", "status": "in_progress"})
DELTA = responses_event(
    "response.output_text.delta", 1, item_id="m", output_index=0, content_index=0, delta="hi"
)
COMPLETED = responses_event(
    "response.completed", 2, response={"id": "resp_1", "status": "completed", "output": []}
)


async def call(client: Any, logs: Any, path: str, body: bytes, headers: dict[str, str]) -> Any:
    before = len(logs.records())
    sent = {**headers, "content-type": "application/json"}
    async with client.post(path, data=body, headers=sent) as response:
        with contextlib.suppress(aiohttp.ClientPayloadError):  # the cut the test scripted
            await response.read()
    return (await logs.wait(before + 1))[-1]


async def test_codex_sending_a_cut_turn_again_in_a_new_key_order_is_linked(
    make_proxy: Any, upstream: Any, logs: Any
) -> None:
    fake, _ = upstream
    client = await make_proxy()
    first_body = orjson.dumps(CODEX["body"])
    again_body = orjson.dumps(reordered(CODEX["body"]))
    assert first_body != again_body and len(first_body) == len(again_body)
    fake.script("/v1/responses", Script([Send(CREATED + DELTA), Close()], headers=SSE))
    first = await call(client, logs, "/v1/responses", first_body, CODEX["headers"])
    fake.script("/v1/responses", Script([Send(CREATED + DELTA + COMPLETED)], headers=SSE))
    again = await call(client, logs, "/v1/responses", again_body, CODEX["headers"])
    assert (first["state"], again["state"]) == ("interrupted", "completed")
    assert again["retry"]["of"] == first["request_id"]
    assert again["retry"]["linked_by"] == "same_meaning"
    assert first["run_id"] == again["run_id"] == CODEX["run_id"]
    assert again["client"] == {"name": "codex", "version": "0.171.0"}


MESSAGE_START = {
    "type": "message_start",
    "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [], "usage": {"input_tokens": 5, "output_tokens": 0}},
}  # fmt: skip
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
ANSWER = {
    "id": "msg_2", "type": "message", "role": "assistant", "model": "m",
    "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 1},
}  # fmt: skip


def anthropic(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


@pytest.mark.parametrize("stream", [None, False], ids=["absent", "false"])
async def test_claude_code_sending_the_turn_again_without_stream_is_linked(
    make_proxy: Any, upstream: Any, logs: Any, stream: bool | None
) -> None:
    fake, _ = upstream
    client = await make_proxy()
    streamed = orjson.dumps(CLAUDE["body"])
    plain = {k: v for k, v in CLAUDE["body"].items() if k != "stream"}
    if stream is not None:
        plain["stream"] = stream
    fake.script(
        "/v1/messages",
        Script([Send(anthropic(MESSAGE_START) + anthropic(OVERLOADED))], headers=SSE),
    )
    first = await call(client, logs, "/v1/messages", streamed, CLAUDE["headers"])
    fake.script(
        "/v1/messages",
        Script([Send(json.dumps(ANSWER).encode())], headers={"Content-Type": "application/json"}),
    )
    again = await call(client, logs, "/v1/messages", orjson.dumps(plain), CLAUDE["headers"])
    assert first["state"] == "failed" and first["error"]["type"] == "overloaded_error"
    assert again["retry"]["of"] == first["request_id"]
    assert again["retry"]["linked_by"] == "without_stream"
    assert first["run_id"] == again["run_id"] == CLAUDE["run_id"]
    assert again["client"] == {"name": "claude-code", "version": "2.1.3"}


@pytest.mark.skipif(not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14")
async def test_codex_falling_back_from_the_websocket_to_http_is_linked(
    aiohttp_server: Any, logs: Any
) -> None:
    up = WsUpstream()
    up.protocols = ()

    async def cut_turn(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()  # response.create
        await ws.send_str(CREATED.split(b"data: ")[1].decode().strip())
        await ws.close(code=1011, message=b"upstream trouble")

    async def http(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers=SSE)
        await response.prepare(request)
        await response.write(CREATED + DELTA + COMPLETED)
        await response.write_eof()
        return response

    up.script = cut_turn
    app = up.app()
    app.router.add_post("/v1/responses", http)
    server = await aiohttp_server(app)
    settings = load(None, {}, {"upstream": str(server.make_url("")).rstrip("/")})
    base = str((await aiohttp_server(create_app(settings))).make_url("")).rstrip("/")
    message = {"type": "response.create", **reordered(CODEX["body"])}
    message.pop("stream")
    headers = {**CODEX["headers"], "openai-beta": "responses_websockets=2026-02-06"}
    async with aiohttp.ClientSession() as http_client:
        ws = await http_client.ws_connect(base + "/v1/responses", headers=headers)
        await ws.send_str(json.dumps(message))
        async for _ in ws:  # until the upstream's close reaches the client
            pass
        [turn] = await logs.wait(1)
        body = orjson.dumps(CODEX["body"])
        sent = {**CODEX["headers"], "content-type": "application/json"}
        async with http_client.post(base + "/v1/responses", data=body, headers=sent) as resp:
            await resp.read()
    records = await logs.wait(2)
    fallback = records[-1]
    assert turn["transport"] == "websocket" and turn["state"] == "interrupted"
    assert fallback["state"] == "completed" and "transport" not in fallback
    assert fallback["retry"]["of"] == turn["request_id"]
    assert fallback["retry"]["linked_by"] == "websocket_fallback"
    [session] = await logs.wait_sessions()
    assert turn["run_id"] == fallback["run_id"] == session["run_id"] == CODEX["run_id"]
    assert turn["client"] == session["client"] == {"name": "codex", "version": "0.171.0"}
