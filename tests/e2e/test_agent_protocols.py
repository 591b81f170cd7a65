"""A2A through the proxy with the `a2a-sdk`'s own server and clients (issue 31, point 1): a
task that fails after `working` is recorded `failed` (main said `completed`), in v1.0 and in
0.3 (the SDK's compat transport), and a task that completes is `completed`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytestmark = pytest.mark.e2e
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("a2a.server.routes")
starlette = pytest.importorskip("starlette.applications")

from a2a.client.client import ClientConfig  # noqa: E402
from a2a.client.client_factory import ClientFactory  # noqa: E402
from a2a.server.agent_execution.agent_executor import AgentExecutor  # noqa: E402
from a2a.server.request_handlers.default_request_handler_v2 import (  # noqa: E402
    DefaultRequestHandlerV2,
)
from a2a.server.routes import create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore  # noqa: E402
from a2a.server.tasks.task_updater import TaskUpdater  # noqa: E402
from a2a.types import a2a_pb2 as pb  # noqa: E402


class Agent(AgentExecutor):
    """Submitted, working, one artifact, then the end the test asks for."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    async def execute(self, context: Any, event_queue: Any) -> None:
        status = pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED)
        task = pb.Task(id=context.task_id, context_id=context.context_id, status=status)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        await updater.add_artifact([pb.Part(text="partial answer")])
        if self.fail:
            await updater.failed(updater.new_agent_message([pb.Part(text="tool crashed")]))
        else:
            await updater.complete()

    async def cancel(self, context: Any, event_queue: Any) -> None:
        return None


def card(url: str, version: str) -> Any:
    interface = pb.AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version=version)
    return pb.AgentCard(
        name="agent",
        description="test agent",
        version="1",
        supported_interfaces=[interface],
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="s", name="s", description="s", tags=["t"])],
    )


@contextlib.asynccontextmanager
async def agent_server(fail: bool) -> AsyncIterator[str]:
    handler = DefaultRequestHandlerV2(Agent(fail), InMemoryTaskStore(), card("http://x/", "1.0"))
    routes = create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)
    app = starlette.Starlette(routes=routes)
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


async def ask(base: str, version: str) -> list[Any]:
    """Send one streaming message with the SDK's client; the stream responses it yields."""
    client = ClientFactory(ClientConfig(streaming=True)).create(card(base + "/", version))
    message = pb.Message(message_id="m1", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])
    seen = []
    try:
        async for response in client.send_message(pb.SendMessageRequest(message=message)):
            seen.append(response)
    finally:
        await client.close()
    return seen


def final_state(responses: list[Any]) -> int:
    """The task state the SDK's client ended on (its responses carry the task snapshot)."""
    last = responses[-1]
    item = last[0] if isinstance(last, tuple) else last
    if item.HasField("status_update"):
        return int(item.status_update.status.state)
    return int(item.task.status.state)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a2a_sdk_failed_task_is_failed_through_the_proxy(version, proxy_server, logs):
    async with agent_server(fail=True) as url:
        base = await proxy_server(url)
        responses = await ask(base, version)
    assert final_state(responses) == pb.TASK_STATE_FAILED  # what the client saw
    [record] = await logs.wait()
    assert (record["dialect"], record["state"], record["finish_reason"]) == (
        "a2a",
        "failed",
        "failed",
    )
    assert record["error"]["message"] == "tool crashed"
    assert record["text_chars"] == len("partial answer")
    assert "events_after_terminal" not in record["anomalies"]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a2a_sdk_completed_task_is_completed_through_the_proxy(version, proxy_server, logs):
    async with agent_server(fail=False) as url:
        base = await proxy_server(url)
        responses = await ask(base, version)
    assert final_state(responses) == pb.TASK_STATE_COMPLETED
    [record] = await logs.wait()
    assert (record["dialect"], record["state"]) == ("a2a", "completed")
    assert record["anomalies"] == {}
