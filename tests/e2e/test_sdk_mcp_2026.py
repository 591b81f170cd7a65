"""MCP 2026-07-28 through the proxy with the official `mcp` SDK (2.3, which speaks 2026-07-28
beside the handshake versions): its `Client(mode="2026-07-28")` against its own `MCPServer`.

The rules are the specification's (modelcontextprotocol/modelcontextprotocol
`docs/specification/2026-07-28/changelog.mdx`, `basic/transports/streamable-http.mdx`): closing
the response stream is the cancellation, a lost request is re-issued under a new id,
`input_required` results make a multi-round-trip request, `subscriptions/listen` stays open
until either side closes it, and a header that disagrees with the body is 400 -32020.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest

pytestmark = pytest.mark.e2e
mcp = pytest.importorskip("mcp")
uvicorn = pytest.importorskip("uvicorn")
aiohttp = pytest.importorskip("aiohttp")
from mcp import Client  # noqa: E402
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve  # noqa: E402
from pydantic import BaseModel  # noqa: E402

NEW = "2026-07-28"


class Confirm(BaseModel):
    ok: bool


def ask(text: str) -> Elicit[Confirm]:
    return Elicit(f"Echo {text}?", Confirm)


def server_of(calls: list[str]) -> Any:
    server: Any = MCPServer("echo")

    @server.tool()
    def echo(text: str) -> str:
        return text * 2

    @server.tool()
    async def slow(text: str, ctx: Context) -> str:
        calls.append(text)
        await ctx.report_progress(1, 2)
        if len(calls) == 1:  # the first call hangs until its client gives up
            await asyncio.sleep(30)
        return text

    @server.tool()
    def confirmed(text: str, answer: Annotated[Confirm, Resolve(ask)]) -> str:
        return text if answer.ok else "no"

    return server


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        web.should_exit = True
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def mcp_proxy(proxy_server) -> AsyncIterator[tuple[str, list[str]]]:
    calls: list[str] = []
    async with serving(server_of(calls).streamable_http_app()) as url:
        yield await proxy_server(url) + "/mcp", calls


def calls_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["method"] == "POST" and r["dialect"] == "mcp"]


async def streams(logs: Any, n: int) -> list[dict[str, Any]]:
    """The first `n` records of SSE responses, once written (a client's close is noticed
    asynchronously)."""
    for _ in range(200):
        found = [r for r in calls_of(logs.records()) if r["content_type"] == "text/event-stream"]
        if len(found) >= n:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{n} stream records expected: {logs.records()}")


async def progress(done: float, total: float | None, message: str | None) -> None:
    """A progress callback: its token makes the server send progress, so the answer is SSE."""


async def test_a_2026_call_is_judged_by_its_version(mcp_proxy, logs) -> None:
    url, _ = mcp_proxy
    async with Client(url, mode=NEW) as client:
        result = await client.call_tool("echo", {"text": "ab"})
    assert result.content[0].text == "abab"
    records = calls_of(await logs.wait(1))
    assert {r["mcp_protocol_version"] for r in records} == {NEW}
    assert {r["state"] for r in records} == {"completed"}
    assert all("mcp_session_id" not in r for r in records)  # no sessions in 2026-07-28


async def test_a_client_that_gives_up_cancels_and_its_re_issue_is_a_retry(mcp_proxy, logs):
    """The SDK cancels by closing the response stream; the server sees the close. The call
    sent again carries a new JSON-RPC id: a retry of the cancelled one, not a resume."""
    url, calls = mcp_proxy
    async with Client(url, mode=NEW) as client:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                client.call_tool("slow", {"text": "x"}, progress_callback=progress), 1.0
            )
        again = client.call_tool("slow", {"text": "x"}, progress_callback=progress)
        result = await asyncio.wait_for(again, 10)
    assert result.content[0].text == "x" and calls == ["x", "x"]
    first, second = await streams(logs, 2)
    assert first["state"] == "cancelled"
    assert first["interruption"]["reason"] == "client_disconnected"
    assert second["state"] == "completed"
    assert second["retry"]["of"] == first["request_id"]
    assert "resume" not in second


async def test_input_required_is_a_pause_and_the_answer_its_next_round_trip(mcp_proxy, logs):
    async def accept(context: Any, params: Any) -> Any:
        from mcp_types import ElicitResult

        return ElicitResult(action="accept", content={"ok": True})

    url, _ = mcp_proxy
    async with Client(url, mode=NEW, elicitation_callback=accept) as client:
        result = await client.call_tool("confirmed", {"text": "yes"})
    assert result.content[0].text == "yes"
    records = calls_of(await logs.wait(2))
    paused = [r for r in records if r["finish_reason"] == "input_required"]
    assert len(paused) == 1, records
    assert (paused[0]["state"], paused[0]["finish_category"]) == ("incomplete", "pause")
    [answer] = [r for r in records if "round_trip" in r]
    assert answer["round_trip"] == {"of": paused[0]["request_id"], "number": 2}
    assert answer["state"] == "completed"


async def test_a_listen_stream_closed_by_its_client_ended_normally(mcp_proxy, logs) -> None:
    url, _ = mcp_proxy
    async with Client(url, mode=NEW) as client, client.listen(tools_list_changed=True):
        await asyncio.sleep(0.2)
    [listen] = await streams(logs, 1)
    assert (listen["state"], listen["finish_reason"]) == ("completed", "client_closed")
    assert listen["interruption"]["reason"] == "client_disconnected"
    assert "no_terminal_signal" not in listen["anomalies"]


async def test_a_header_that_disagrees_with_the_body_is_named(mcp_proxy, logs) -> None:
    """The SDK's own server answers a `Mcp-Name` that is not the body's name with 400 and
    -32020; the record names it."""
    url, _ = mcp_proxy
    meta = {
        "io.modelcontextprotocol/protocolVersion": NEW,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "a"}, "_meta": meta},
    }
    headers = {
        "MCP-Protocol-Version": NEW,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "other",
        "Accept": "application/json, text/event-stream",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as r,
    ):
        answer = await r.json()
    assert (r.status, answer["error"]["code"]) == (400, -32020)
    [record] = await logs.wait(1)
    assert (record["state"], record["finish_reason"]) == ("http_error", "header_mismatch")
