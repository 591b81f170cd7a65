"""The official SDKs' WebSocket clients (openai's `realtime.connect()` and
`responses.connect()`, google-genai's `aio.live.connect()`), pointed at the proxy on its
default routes in front of a scripted WebSocket upstream: what each SDK saw must agree with
the records."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import ssl
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from sseproxy.config import Settings, load, make_route
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.ws_upstream import WsUpstream

pytestmark = pytest.mark.e2e
openai = pytest.importorskip("openai")
pytest.importorskip("websockets")
genai = pytest.importorskip("google.genai")
trustme = pytest.importorskip("trustme")
pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)


def proxy_settings(target: str) -> Settings:
    """The default config, every route re-pointed at `target`."""
    settings = load()
    routes = tuple(
        make_route(r.name, r.paths, target, r.strip_prefix, r.dialect) for r in settings.routes
    )
    return replace(settings, routes=routes)


@pytest.fixture
async def ws_target(aiohttp_server) -> tuple[WsUpstream, str]:
    up = WsUpstream()
    up.protocols = ()
    server = await aiohttp_server(up.app())
    return up, str(server.make_url("")).rstrip("/")


@pytest.fixture
async def scripted(aiohttp_server, ws_target, logs) -> tuple[WsUpstream, str]:
    """(the scripted upstream, the proxy's URL on the default routes)."""
    up, target = ws_target
    proxy = await aiohttp_server(create_app(proxy_settings(target)))
    return up, str(proxy.make_url("")).rstrip("/")


def j(obj: Any) -> str:
    return json.dumps(obj)


# The GA `client.realtime` and `client.responses.connect()` are newer than the openai floor the
# rest of the suite runs on (.ci/floors.txt): on an older SDK these two are skipped, saying so.
@pytest.mark.skipif(
    not hasattr(openai.AsyncOpenAI, "realtime"), reason="this openai has no client.realtime"
)
async def test_openai_realtime_connect_sees_what_the_record_says(scripted, logs) -> None:
    up, base = scripted
    done = {
        "id": "resp_1",
        "object": "realtime.response",
        "status": "incomplete",
        "status_details": {"type": "incomplete", "reason": "max_output_tokens"},
        "output": [],
        "usage": {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9},
    }

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(
            j(
                {
                    "type": "session.created",
                    "event_id": "e0",
                    "session": {"id": "sess_1", "object": "realtime.session", "type": "realtime"},
                }
            )
        )
        async for msg in ws:
            event = json.loads(msg.data)
            if event["type"] == "response.create":
                await ws.send_str(
                    j(
                        {
                            "type": "response.created",
                            "event_id": "e1",
                            "response": {
                                "id": "resp_1",
                                "object": "realtime.response",
                                "status": "in_progress",
                                "output": [],
                            },
                        }
                    )
                )
                for n, piece in enumerate(["Hel", "lo"]):
                    await ws.send_str(
                        j(
                            {
                                "type": "response.output_text.delta",
                                "event_id": f"d{n}",
                                "response_id": "resp_1",
                                "item_id": "it",
                                "output_index": 0,
                                "content_index": 0,
                                "delta": piece,
                            }
                        )
                    )
                await ws.send_str(j({"type": "response.done", "event_id": "e9", "response": done}))

    up.script = script
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
    text, status = "", None
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await conn.response.create()
        async for event in conn:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.done":
                status = event.response.status
                break
    [turn] = await logs.wait(1)
    [session] = await logs.wait_sessions()
    assert (text, status) == ("Hello", "incomplete")
    assert (turn["dialect"], turn["state"], turn["finish_reason"]) == (
        "openai-realtime",
        "incomplete",
        "max_output_tokens",
    )
    assert turn["text_chars"] == len(text)
    assert turn["usage"]["output_tokens"] == 2
    assert up.seen[0].path.startswith("/v1/realtime?model=gpt-realtime")
    assert (session["closed_by"], session["turns"], session["route"]) == ("client", 1, "openai")


@pytest.mark.skipif(
    not hasattr(importlib.import_module("openai.resources.responses").AsyncResponses, "connect"),
    reason="this openai has no client.responses.connect()",
)
async def test_openai_responses_connect_sees_what_the_record_says(scripted, logs) -> None:
    up, base = scripted

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        async for msg in ws:
            event = json.loads(msg.data)
            if event["type"] != "response.create":
                continue
            r = {
                "id": "resp_7",
                "object": "response",
                "created_at": 1,
                "status": "in_progress",
                "model": "gpt-5",
                "output": [],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            }
            await ws.send_str(j({"type": "response.created", "sequence_number": 0, "response": r}))
            await ws.send_str(
                j(
                    {
                        "type": "response.output_text.delta",
                        "sequence_number": 1,
                        "item_id": "m",
                        "output_index": 0,
                        "content_index": 0,
                        "delta": "Hi!",
                        "logprobs": [],
                    }
                )
            )
            await ws.send_str(
                j(
                    {
                        "type": "response.completed",
                        "sequence_number": 2,
                        "response": {
                            **r,
                            "status": "completed",
                            "usage": {
                                "input_tokens": 3,
                                "output_tokens": 1,
                                "total_tokens": 4,
                                "input_tokens_details": {"cached_tokens": 0},
                                "output_tokens_details": {"reasoning_tokens": 0},
                            },
                        },
                    }
                )
            )

    up.script = script
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
    text, status = "", None
    async with client.responses.connect() as conn:
        await conn.response.create(model="gpt-5", input="hi")
        async for event in conn:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.completed":
                status = event.response.status
                break
    [turn] = await logs.wait(1)
    assert (text, status) == ("Hi!", "completed")
    assert (turn["dialect"], turn["state"], turn["text_chars"]) == (
        "openai-responses",
        "completed",
        3,
    )
    assert up.seen[0].path == "/v1/responses"


# google-genai with websockets 13.x-14.x sends User-Agent twice in its handshake, which the
# proxy's HTTP server (aiohttp, strict about singleton headers) refuses with a 400: docs/providers.md says
# to use websockets 15 beside google-genai.
WEBSOCKETS_MAJOR = int(importlib.metadata.version("websockets").split(".")[0])


@pytest.mark.skipif(
    WEBSOCKETS_MAJOR < 15, reason="google-genai Live through a proxy needs websockets 15+"
)
async def test_google_genai_live_connect_sees_what_the_record_says(
    aiohttp_server, ws_target, logs
) -> None:
    up, target = ws_target
    from google.genai import types

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        msg = await ws.receive()  # setup
        assert "setup" in json.loads(msg.data)
        await ws.send_bytes(j({"setupComplete": {}}).encode())
        await ws.receive()  # the user's turn
        for piece in ["Hi ", "there"]:
            await ws.send_bytes(
                j({"serverContent": {"modelTurn": {"parts": [{"text": piece}]}}}).encode()
            )
        await ws.send_bytes(j({"serverContent": {"generationComplete": True}}).encode())
        await ws.send_bytes(
            j(
                {
                    "serverContent": {"turnComplete": True},
                    "usageMetadata": {
                        "promptTokenCount": 4,
                        "responseTokenCount": 2,
                        "totalTokenCount": 6,
                    },
                }
            ).encode()
        )
        await ws.receive()

    up.script = script
    # google-genai makes its Live URL wss:// from the HTTP base URL and always passes an SSL
    # context: it reaches the proxy only through TLS (here the proxy's app served over TLS).
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    proxy = await aiohttp_server(create_app(proxy_settings(target)), ssl=server_tls)
    base = str(proxy.make_url("")).rstrip("/").replace("http://", "https://")
    key = "gk-0123456789abcdef0123456789abcdef"
    client = genai.Client(
        api_key=key,
        http_options=types.HttpOptions(base_url=base, async_client_args={"ssl": client_tls}),
    )
    text = ""
    async with client.aio.live.connect(
        model="gemini-live-test", config={"response_modalities": ["TEXT"]}
    ) as session:
        await session.send_client_content(turns={"role": "user", "parts": [{"text": "hi"}]})
        async for message in session.receive():
            if message.text:
                text += message.text
            if message.server_content and message.server_content.turn_complete:
                break
    [turn] = await logs.wait(1)
    [record] = await logs.wait_sessions()
    assert text == "Hi there"
    assert (turn["dialect"], turn["state"], turn["text_chars"]) == (
        "gemini-live",
        "completed",
        len(text),
    )
    assert turn["usage"]["output_tokens"] == 2
    assert key not in "".join(logs.stream.history)
    assert record["route"] == "gemini"
