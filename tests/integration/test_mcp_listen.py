"""An MCP 2026-07-28 `subscriptions/listen` stream stays open until either side closes it
(modelcontextprotocol `docs/specification/2026-07-28/changelog.mdx`; servers are encouraged
to send `:` keep-alives, not required to): the proxy's idle timeout does not cut it, and its
client's close is its normal end. A request's own stream is still judged by the timeout."""

from __future__ import annotations

import asyncio
import json

from tests.integration.fake_upstream import Script, Send, Sleep

NEW = "2026-07-28"
ACK = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {}}


def request(method: str, rpc_id: int) -> bytes:
    meta = {"io.modelcontextprotocol/protocolVersion": NEW}
    return json.dumps(
        {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"_meta": meta}}
    ).encode()


async def open_then_leave(client, method: str, wait: float) -> bytes:
    headers = {
        "MCP-Protocol-Version": NEW,
        "Mcp-Method": method,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with client.post("/mcp", data=request(method, 1), headers=headers) as response:
        first = await response.content.readany()
        await asyncio.sleep(wait)
        return first


async def test_a_silent_listen_stream_outlives_the_idle_timeout(upstream, make_proxy, logs):
    fake, _ = upstream
    fake.script("/mcp", Script([Send(f"data: {json.dumps(ACK)}\n\n".encode()), Sleep(5)]))
    client = await make_proxy(idle_timeout=0.3)
    first = await open_then_leave(client, "subscriptions/listen", 0.8)
    assert b"acknowledged" in first
    [record] = await logs.wait()
    assert (record["state"], record["finish_reason"]) == ("completed", "client_closed")
    assert record["interruption"]["reason"] == "client_disconnected"  # not idle_timeout


async def test_a_silent_call_is_still_cut_by_the_idle_timeout(upstream, make_proxy, logs):
    fake, _ = upstream
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
    fake.script("/mcp", Script([Send(f"data: {json.dumps(progress)}\n\n".encode()), Sleep(5)]))
    client = await make_proxy(idle_timeout=0.3)
    await open_then_leave(client, "tools/call", 0.8)
    [record] = await logs.wait()
    assert record["state"] == "interrupted"
    assert record["interruption"]["reason"] == "idle_timeout"
