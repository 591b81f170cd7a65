"""The official clients' own resumes through the proxy: the openai SDK's
`responses.retrieve(..., stream=True, starting_after=N)` after a cut background stream, and
the `mcp` SDK's streamable-HTTP client against a real MCP server."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.fake_upstream import Close, Script, Send
from tests.integration.test_resume import COMPLETED, CREATED, rev

pytestmark = pytest.mark.e2e
openai = pytest.importorskip("openai")
SSE = {"Content-Type": "text/event-stream"}


async def cut_background_response(client: Any) -> list[int]:
    """Create a background stream the upstream cuts; the sequence numbers the SDK yielded."""
    seen: list[int] = []
    with pytest.raises(openai.APIError):
        stream = await client.responses.create(
            model="gpt-test", input="hi", stream=True, background=True
        )
        async for event in stream:
            seen.append(event.sequence_number)
    return seen


@pytest.mark.parametrize(
    ("after", "verdict", "missing"), [(3, "continuous", []), (1, "gap", ["2", "3"])]
)
async def test_openai_sdk_resume_with_starting_after(
    upstream, proxy_url, logs, after, verdict, missing
) -> None:
    fake, _ = upstream
    fake.script(
        "/v1/responses", Script([Send(CREATED + rev(1) + rev(2) + rev(3)), Close()], headers=SSE)
    )
    fake.script("/v1/responses/resp_1", Script([Send(rev(4) + rev(5) + COMPLETED)], headers=SSE))
    client = openai.AsyncOpenAI(base_url=proxy_url + "/v1", api_key="sk-test", max_retries=0)
    assert await cut_background_response(client) == [0, 1, 2, 3]
    resumed = await client.responses.retrieve("resp_1", stream=True, starting_after=after)
    numbers = [event.sequence_number async for event in resumed]
    await client.close()
    assert numbers == [4, 5, 9]
    original, record = (await logs.wait(2))[-2:]
    assert record["path"] == f"/v1/responses/resp_1?starting_after={after}&stream=true"
    assert (record["state"], record["resume"]["of"]) == ("completed", original["request_id"])
    assert (record["resume"]["verdict"], record["resume"]["missing"]) == (verdict, missing)


# -- the mcp SDK -------------------------------------------------------------------------------

mcp = pytest.importorskip("mcp")
uvicorn = pytest.importorskip("uvicorn")


@pytest.fixture
async def mcp_server() -> AsyncIterator[str]:
    """A real MCP server (the SDK's own) on loopback: its base URL."""
    from mcp.server.mcpserver import MCPServer

    server: Any = MCPServer("echo")

    @server.tool()
    def echo(text: str) -> str:
        return text * 2

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning"))
    task = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    web.should_exit = True
    await asyncio.wait_for(task, 10)


async def test_mcp_sdk_streamable_http_client_through_the_proxy(mcp_server, proxy_server, logs):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    base = await proxy_server(mcp_server)
    async with (
        streamable_http_client(base + "/mcp") as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        result = await session.call_tool("echo", {"text": "ab"})
    assert result.content[0].text == "abab"
    records = await logs.wait(4)
    calls = [r for r in records if r["method"] == "POST" and r["status"] == 200]
    assert calls and all(r["dialect"] == "mcp" for r in calls)
    assert {r["state"] for r in calls} == {"completed"}
    # The server names the session in initialize's response; every later request carries it.
    [session_id] = {r["mcp_session_id"] for r in calls[1:]}
    assert len(session_id) >= 16 and "*" not in session_id
    tool = [r for r in calls if r["text_chars"] == len("abab")]
    assert tool, json.dumps(calls)[:500]
