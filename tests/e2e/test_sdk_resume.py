"""The official clients' own resumes through the proxy: the openai SDK's
`responses.retrieve(..., stream=True, starting_after=N)` after a cut background stream, and
the `mcp` SDK's streamable-HTTP client against a real MCP server."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
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


# Background responses and `starting_after` are newer than the openai floor the rest of the suite
# runs on (.ci/floors.txt): on an older SDK this test is skipped, saying so.
@pytest.mark.skipif(
    "background"
    not in inspect.signature(
        importlib.import_module("openai.resources.responses").AsyncResponses.create
    ).parameters,
    reason="this openai has no background responses",
)
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
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402  (tool annotations name it)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """An ASGI app (the SDK's own MCP server) served on loopback: its base URL."""
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


class Events:
    """The smallest event store (the SDK ships only the interface): what a resumable server
    keeps to replay a stream after a `Last-Event-ID`."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []  # (stream id, event id, message)

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = f"{stream_id}-{len(self.events)}"
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send: Any) -> str | None:
        from mcp.server.streamable_http import EventMessage

        at = [i for i, (_, event_id, _) in enumerate(self.events) if event_id == last_event_id]
        if not at:
            return None
        stream = self.events[at[0]][0]
        for stream_id, event_id, message in self.events[at[0] + 1 :]:
            if stream_id == stream and message is not None:
                await send(EventMessage(message, event_id))
        return stream


def echo_server() -> Any:
    server: Any = MCPServer("echo")

    @server.tool()
    def echo(text: str) -> str:
        return text * 2

    @server.tool()
    async def later(text: str, ctx: Context) -> str:
        await ctx.close_sse_stream()  # the client reconnects with Last-Event-ID for the answer
        await asyncio.sleep(0.05)
        return text * 3

    return server


@pytest.fixture
async def mcp_server() -> AsyncIterator[str]:
    async with serving(echo_server().streamable_http_app()) as url:
        yield url


@pytest.fixture
async def resumable_mcp_server() -> AsyncIterator[str]:
    from mcp.server.streamable_http import EventStore

    store = type("Store", (Events, EventStore), {})()
    app = echo_server().streamable_http_app(event_store=store, retry_interval=20)
    async with serving(app) as url:
        yield url


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


async def test_mcp_sdk_resumes_a_closed_stream_with_last_event_id(
    resumable_mcp_server, proxy_server, logs
):
    """The server closes the tool call's stream before the answer; the SDK reconnects with
    GET + Last-Event-ID (after the priming event's retry) and gets it there."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    base = await proxy_server(resumable_mcp_server)
    async with (
        streamable_http_client(base + "/mcp") as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        result = await asyncio.wait_for(session.call_tool("later", {"text": "ab"}), 10)
    assert result.content[0].text == "ababab"
    records = await logs.wait(6)
    [resumed] = [r for r in records if "resume" in r]
    [call] = [r for r in records if r["request_id"] == resumed["resume"]["of"]]
    assert (call["method"], call["state"], call["sse_retry_ms"]) == ("POST", "unconfirmed", 20)
    assert call["anomalies"] == {"no_terminal_signal": 1}  # closed before its response
    assert (resumed["method"], resumed["state"]) == ("GET", "completed")
    assert resumed["resume"]["verdict"] == "continuous"
    assert resumed["mcp_session_id"] == call["mcp_session_id"]
