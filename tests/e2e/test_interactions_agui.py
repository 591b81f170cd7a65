"""Gemini Interactions and AG-UI through the proxy on its default routes (issue 31, point 4).

Interactions: google-genai's own `interactions` client creates a streamed interaction whose
stream the upstream cuts, then resumes it with `get(..., stream=True, last_event_id=...)`; the
record of the resume names the original (as a Responses `starting_after` resume does). Events
are the SDK's models dumped by alias. AG-UI has no official Python client: the stream is what
the `ag-ui-protocol` package's `EventEncoder` writes, read by httpx as a browser's EventSource
would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.fake_upstream import Close, Script, Send

pytestmark = pytest.mark.e2e
genai = pytest.importorskip("google.genai")
t = pytest.importorskip("google.genai.interactions")
httpx = pytest.importorskip("httpx")
core = pytest.importorskip("ag_ui.core")
SSE = {"Content-Type": "text/event-stream"}
ID = "v1_abc"


def frame(model: Any) -> bytes:
    obj = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return f"event: {obj['event_type']}\ndata: {json.dumps(obj)}\n\n".encode()


def delta(text: str, n: int) -> bytes:
    return frame(t.StepDelta(index=0, delta={"type": "text", "text": text}, event_id=f"e{n}"))


CREATED = frame(
    t.InteractionCreatedEvent(
        interaction={"id": ID, "status": "in_progress", "model": "gemini-3-flash"}, event_id="e1"
    )
)
START = frame(t.StepStart(index=0, step={"type": "model_output", "content": []}, event_id="e2"))
STOP = frame(t.StepStop(index=0, event_id="e6"))


def completed(status: str) -> bytes:
    interaction = {"id": ID, "status": status, "steps": []}
    return frame(t.InteractionCompletedEvent(interaction=interaction, event_id="e7"))


def client(base: str) -> Any:
    from google.genai import types

    return genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base))


async def collect(stream: Any) -> list[Any]:
    return [event async for event in stream]


async def test_interactions_sdk_completed_and_failed(upstream, proxy_url, logs) -> None:
    fake, _ = upstream
    body = CREATED + START + delta("Hello", 3) + delta(", world", 4) + STOP + completed("failed")
    fake.script("/v1/interactions", Script([Send(body)], headers=SSE))
    async with client(proxy_url).aio as aio:
        events = await collect(
            await aio.interactions.create(model="gemini-3-flash", input="Hi", stream=True)
        )
    assert events[-1].interaction.status == "failed"  # what the SDK handed the app
    [record] = await logs.wait()
    assert (record["dialect"], record["state"], record["finish_reason"]) == (
        "gemini-interactions",
        "failed",
        "failed",
    )
    assert record["text_chars"] == len("Hello, world")


async def test_interactions_sdk_resume_by_last_event_id_is_linked(upstream, proxy_url, logs):
    fake, _ = upstream
    first = CREATED + START + delta("Hello", 3)
    fake.script("/v1/interactions", Script([Send(first), Close()], headers=SSE))
    rest = delta(", world", 4) + STOP + completed("completed")
    fake.script(f"/v1/interactions/{ID}", Script([Send(rest)], headers=SSE))
    async with client(proxy_url).aio as aio:
        seen: list[Any] = []
        with pytest.raises(Exception):  # noqa: B017  (the SDK raises its own error on the cut)
            async for event in await aio.interactions.create(
                model="gemini-3-flash", input="Hi", stream=True
            ):
                seen.append(event)
        last = [e.event_id for e in seen if getattr(e, "event_id", None)][-1]
        assert last == "e3"
        resumed = await collect(await aio.interactions.get(id=ID, stream=True, last_event_id=last))
    assert resumed[-1].interaction.status == "completed"
    original, record = (await logs.wait(2))[-2:]
    assert (original["dialect"], original["state"]) == ("gemini-interactions", "interrupted")
    assert (record["dialect"], record["state"]) == ("gemini-interactions", "completed")
    assert record["resume"]["of"] == original["request_id"]
    assert (record["resume"]["cursor"], record["resume"]["verdict"]) == ("e3", "continuous")


async def test_ag_ui_run_error_is_failed_through_the_proxy(upstream, proxy_url, logs) -> None:
    from ag_ui.encoder import EventEncoder

    encoder = EventEncoder()
    events = [
        core.RunStartedEvent(thread_id="t1", run_id="r1"),
        core.TextMessageStartEvent(message_id="m1", role="assistant"),
        core.TextMessageContentEvent(message_id="m1", delta="Hi"),
        core.RunErrorEvent(message="model overloaded", code="overloaded"),
    ]
    body = ("".join(encoder.encode(e) for e in events)).encode() + b": ping\n\n"
    fake, _ = upstream
    fake.script("/v1/agent", Script([Send(body)], headers=SSE))
    async with httpx.AsyncClient() as http:
        reply = await http.post(proxy_url + "/v1/agent", json={"threadId": "t1", "runId": "r1"})
    assert b"RUN_ERROR" in reply.content
    [record] = await logs.wait()
    assert (record["dialect"], record["state"]) == ("ag-ui", "failed")
    assert record["error"]["message"] == "model overloaded"
