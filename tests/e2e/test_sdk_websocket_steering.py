"""openai-python's own Responses WebSocket client (`client.beta.responses.connect()`, with
`response.create(stream_id=...)` and `response.steer(...)`), pointed at the proxy on its
default routes, against a scripted upstream: what the SDK hands the app and what the records
say agree (two lanes, a steered response and the successor the server made)."""

from __future__ import annotations

import importlib
import json
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from sseproxy.config import Settings, load, make_route
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.ws_upstream import WsUpstream

openai = pytest.importorskip("openai")
pytest.importorskip("websockets")


def _beta_responses() -> object:
    """openai's beta Responses resources, or None where this openai has none (the floor's
    1.66 has no `openai.resources.beta.responses`)."""
    try:
        return importlib.import_module("openai.resources.beta.responses")
    except ImportError:
        return None


pytestmark = [
    pytest.mark.skipif(not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"),
    pytest.mark.skipif(
        not hasattr(getattr(_beta_responses(), "AsyncResponses", None), "connect"),
        reason="this openai has no client.beta.responses.connect() (steering, lanes)",
    ),
]


def proxy_settings(target: str) -> Settings:
    settings = load()
    routes = tuple(
        make_route(r.name, r.paths, target, r.strip_prefix, r.dialect) for r in settings.routes
    )
    return replace(settings, routes=routes)


def j(obj: Any) -> str:
    return json.dumps(obj)


def response(rid: str, status: str, **more: Any) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "gpt-5.5",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **more,
    }


def event(kind: str, seq: int, lane: str, **fields: Any) -> str:
    return j({"type": kind, "sequence_number": seq, "stream_id": lane, **fields})


def delta(text: str, seq: int, lane: str) -> str:
    return event(
        "response.output_text.delta",
        seq,
        lane,
        item_id=f"msg_{lane}",
        output_index=0,
        content_index=0,
        delta=text,
        logprobs=[],
    )


async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
    creates = 0
    async for msg in ws:
        sent = json.loads(msg.data)
        if sent["type"] == "response.create":
            creates += 1
            if creates == 2:
                await ws.send_str(
                    event("response.created", 0, "a", response=response("resp_a", "in_progress"))
                )
                await ws.send_str(
                    event("response.created", 0, "b", response=response("resp_b", "in_progress"))
                )
                await ws.send_str(delta("Roses are", 1, "a"))
                await ws.send_str(delta("Violets", 1, "b"))
        elif sent["type"] == "response.steer":
            steer = {"id": "steer_1", "previous_response_id": sent["previous_response_id"]}
            await ws.send_str(event("response.steer.accepted", 2, "a", steer=steer))
            details = {"incomplete_details": {"reason": "steered"}}
            incomplete = response("resp_a", "incomplete", **details)
            await ws.send_str(event("response.incomplete", 3, "a", response=incomplete))
            await ws.send_str(
                event("response.created", 0, "a", response=response("resp_a2", "in_progress"))
            )
            await ws.send_str(delta("Les roses", 1, "a"))
            await ws.send_str(
                event("response.completed", 2, "b", response=response("resp_b", "completed"))
            )
            await ws.send_str(
                event("response.completed", 2, "a", response=response("resp_a2", "completed"))
            )


async def test_openai_steering_and_lanes_see_what_the_records_say(aiohttp_server, logs) -> None:
    up = WsUpstream()
    up.protocols = ()
    up.script = script
    target = await aiohttp_server(up.app())
    proxy = await aiohttp_server(create_app(proxy_settings(str(target.make_url("")).rstrip("/"))))
    base = str(proxy.make_url("")).rstrip("/")
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
    seen: list[tuple[str, Any, Any]] = []
    async with client.beta.responses.connect() as conn:
        await conn.response.create(model="gpt-5.5", input="A poem", stream_id="a")
        await conn.response.create(model="gpt-5.5", input="A poem", stream_id="b")
        async for got in conn:
            rid = getattr(getattr(got, "response", None), "id", None)
            seen.append((got.type, getattr(got, "stream_id", None), rid))
            if got.type == "response.output_text.delta" and got.stream_id == "a" and len(seen) == 3:
                await conn.response.steer(previous_response_id="resp_a", input="In French.")
            if got.type == "response.completed" and rid == "resp_a2":
                break
    assert ("response.steer.accepted", "a", None) in seen
    assert ("response.incomplete", "a", "resp_a") in seen
    turns = sorted(await logs.wait(3), key=lambda r: r["turn"])
    assert [(t["lane"], t["state"], t["finish_reason"], t.get("continues")) for t in turns] == [
        ("a", "incomplete", "steered", None),
        ("b", "completed", "completed", None),
        ("a", "completed", "completed", {"turn": 1, "response_id": "resp_a"}),
    ]
    assert all(t["anomalies"] == {} for t in turns)
    assert up.seen[0].path == "/v1/responses"
