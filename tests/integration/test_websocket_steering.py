"""Responses over a WebSocket through the proxy: two lanes at once and a steered response
handed over to the successor the server makes. The fake upstream speaks the shapes of
openai-python 3.57's `types/beta` (`ResponseCreate.stream_id`, `BetaResponseSteerEvent`,
`BetaResponseSteerAcceptedEvent`, `BetaResponseIncompleteEvent` with reason `steered`)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.ws_upstream import WsUpstream

pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)


def j(obj: Any) -> str:
    return json.dumps(obj)


def created(rid: str, lane: str) -> str:
    response = {"id": rid, "object": "response", "status": "in_progress", "model": "gpt-5.5"}
    return j(
        {"type": "response.created", "sequence_number": 0, "response": response, "stream_id": lane}
    )


def delta(text: str, seq: int, lane: str) -> str:
    return j(
        {
            "type": "response.output_text.delta",
            "sequence_number": seq,
            "item_id": f"msg_{lane}",
            "output_index": 0,
            "content_index": 0,
            "delta": text,
            "stream_id": lane,
        }
    )


def ended(kind: str, rid: str, seq: int, lane: str, **response: Any) -> str:
    body = {"id": rid, "object": "response", "status": kind, "output": [], **response}
    return j(
        {"type": f"response.{kind}", "sequence_number": seq, "response": body, "stream_id": lane}
    )


async def steering_upstream(ws: web.WebSocketResponse, request: web.Request) -> None:
    await ws.receive()  # response.create, lane "a"
    await ws.receive()  # response.create, lane "b"
    for frame in (created("resp_a", "a"), created("resp_b", "b")):
        await ws.send_str(frame)
    await ws.send_str(delta("Roses are", 1, "a"))
    await ws.send_str(delta("Violets", 1, "b"))
    await ws.receive()  # response.steer of resp_a
    accepted = {
        "type": "response.steer.accepted",
        "sequence_number": 2,
        "steer": {"id": "steer_1", "previous_response_id": "resp_a"},
        "stream_id": "a",
    }
    await ws.send_str(j(accepted))
    await ws.send_str(
        ended("incomplete", "resp_a", 3, "a", incomplete_details={"reason": "steered"})
    )
    await ws.send_str(created("resp_a2", "a"))  # the server's successor: nobody asked for it
    await ws.send_str(delta("Les roses", 1, "a"))
    await ws.send_str(ended("completed", "resp_b", 2, "b"))
    await ws.send_str(ended("completed", "resp_a2", 2, "a"))
    await ws.close(code=1000, message=b"done")


async def test_lanes_and_a_steered_hand_over_are_recorded_turn_by_turn(
    aiohttp_server, logs
) -> None:
    up = WsUpstream()
    up.protocols = ()
    up.script = steering_upstream
    upstream = await aiohttp_server(up.app())
    settings = load(None, {}, {"upstream": str(upstream.make_url("")).rstrip("/")})
    proxy = await aiohttp_server(create_app(settings))
    got: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(proxy.make_url("/v1/responses"), autoclose=False)
        for lane in ("a", "b"):
            create = {
                "type": "response.create",
                "model": "gpt-5.5",
                "input": "A poem",
                "stream_id": lane,
            }
            await ws.send_str(j(create))
        await ws.send_str(
            j({"type": "response.steer", "previous_response_id": "resp_a", "input": "In French."})
        )
        while (msg := await ws.receive()).type is WSMsgType.TEXT:
            got.append(json.loads(msg.data))
        await ws.close()
    assert len(got) == 10 and got[4]["type"] == "response.steer.accepted"  # all relayed
    [session] = await logs.wait_sessions()
    turns = sorted(await logs.wait(3), key=lambda r: r["turn"])
    summary = [
        (
            t["turn"],
            t["lane"],
            t["response_id"],
            t["state"],
            t["finish_reason"],
            t["finish_category"],
        )
        for t in turns
    ]
    assert summary == [
        (1, "a", "resp_a", "incomplete", "steered", "pause"),
        (2, "b", "resp_b", "completed", "completed", "stop"),
        (3, "a", "resp_a2", "completed", "completed", "stop"),
    ]
    assert [t.get("continues") for t in turns] == [None, None, {"turn": 1, "response_id": "resp_a"}]
    assert [t["text_chars"] for t in turns] == [9, 7, 9]
    assert all(t["anomalies"] == {} and t["model"] == "gpt-5.5" for t in turns)
    assert session["anomalies"] == {}  # no active_response_conflict, no unknown_event_type
    assert session["steering"] == {"accepted": 1, "sent": 1}
    assert (session["turns"], session["states"]) == (3, {"completed": 2, "incomplete": 1})
