"""The record agrees with what the client saw when the upstream body is truncated: a chunked
body without its last chunk, fewer bytes than Content-Length, a reset — for every dialect, cut
after the outcome but before the end marker, and cut after the end marker."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.tools.replay import ReplayOptions, replay
from tests.integration.conftest import captured
from tests.integration.raw_upstream import RST, Body, Hangup, Pause, RawScript, RawUpstream
from tests.unit.test_transport_truth import (
    ANTHROPIC,
    BEDROCK_CONVERSE,
    BEDROCK_INVOKE,
    CHAT,
    COHERE,
    GEMINI,
    OLLAMA,
    PLAIN,
    RESPONSES,
    VERCEL,
    Case,
)

PATHS = {
    CHAT: "/v1/chat/completions",
    RESPONSES: "/v1/responses",
    ANTHROPIC: "/v1/messages",
    GEMINI: "/v1beta/models/g:streamGenerateContent?alt=sse",
    VERCEL: "/api/chat-ui",
    OLLAMA: "/api/chat",
    PLAIN: "/events",
    BEDROCK_CONVERSE: "/model/m/converse-stream",
    BEDROCK_INVOKE: "/model/m/invoke-with-response-stream",
    COHERE: "/v2/chat",
}
EVENTSTREAM = {"Content-Type": "application/vnd.amazon.eventstream"}
HEADERS = {
    VERCEL: {"Content-Type": "text/event-stream", "x-vercel-ai-ui-message-stream": "v1"},
    OLLAMA: {"Content-Type": "application/x-ndjson"},
    BEDROCK_CONVERSE: EVENTSTREAM,
    BEDROCK_INVOKE: EVENTSTREAM,
}
CASES = list(PATHS)


@dataclass(frozen=True)
class Truncation:
    name: str
    framing: str  # RawScript framing; {n} is replaced by the declared length
    end: type[Hangup] | type[RST]
    reason: str


TRUNCATIONS = [
    Truncation("chunked_without_last_chunk", "chunked", Hangup, "upstream_closed"),
    Truncation("short_content_length", "length:{n}", Hangup, "upstream_closed"),
    Truncation("reset_mid_body", "chunked", RST, "upstream_reset"),
]


@pytest.fixture
async def raw() -> AsyncIterator[RawUpstream]:
    up = RawUpstream()
    await up.start()
    yield up
    await up.stop()


async def fetch(client, path: str) -> tuple[bytes, bool]:
    """The body the client read, and whether the client saw the transfer break."""
    got = bytearray()
    try:
        async with client.post(path, json={"stream": True}) as response:
            async for chunk in response.content.iter_any():
                got += chunk
    except aiohttp.ClientPayloadError:
        return bytes(got), True
    return bytes(got), False


def script(case: Case, body: bytes, framing: str, end: type[Hangup] | type[RST]) -> RawScript:
    headers = HEADERS.get(case, {"Content-Type": "text/event-stream"})
    declared = framing.format(n=len(body) + 100)
    return RawScript([Body(body), end()], framing=declared, headers=dict(headers))


@pytest.mark.parametrize("cut", TRUNCATIONS, ids=lambda t: t.name)
@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c.dialect))
async def test_truncated_before_the_end_marker_is_interrupted(
    relay_mode, case: Case, cut: Truncation, raw, aiohttp_client, logs
) -> None:
    raw.script = script(case, case.decided, cut.framing, cut.end)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
    got, broke = await fetch(client, PATHS[case])
    assert (got, broke) == (case.decided, True)  # the client saw exactly this and a break
    record = (await logs.wait())[0]
    assert (record["state"], record["http_complete"], record["level"]) == (
        "interrupted",
        False,
        "error",
    )
    assert record["interruption"]["reason"] == cut.reason


@pytest.mark.parametrize("cut", TRUNCATIONS, ids=lambda t: t.name)
@pytest.mark.parametrize("case", [c for c in CASES if c.marker], ids=lambda c: str(c.dialect))
async def test_truncated_after_the_end_marker_is_interrupted_and_keeps_the_outcome(
    relay_mode, case: Case, cut: Truncation, raw, aiohttp_client, logs
) -> None:
    """The end marker arrived, then the body broke: nearly every client raises (anthropic,
    openai Responses, cohere, ollama, boto3, httpx-sse, node), so the record is never
    `completed`; the finish reason that had arrived is kept."""
    raw.script = script(case, case.whole, cut.framing, cut.end)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
    got, broke = await fetch(client, PATHS[case])
    assert (got, broke) == (case.whole, True)
    record = (await logs.wait())[0]
    assert (record["state"], record["http_complete"], record["level"]) == (
        "interrupted",
        False,
        "error",
    )
    assert (record["dialect"], record["finish_reason"], record["finish_category"]) == (
        str(case.dialect),
        case.finish,
        "stop",
    )
    assert record["interruption"] == {"reason": cut.reason, "partial_event_bytes": 0}
    assert record["anomalies"] == {"truncated_after_terminal": 1}


@pytest.mark.parametrize("framing", ["chunked", "length:{n}", "http10"])
@pytest.mark.parametrize("case", [CHAT, GEMINI, PLAIN], ids=lambda c: str(c.dialect))
async def test_a_body_that_ended_by_its_framing_is_http_complete(
    relay_mode, case: Case, framing: str, raw, aiohttp_client, logs
) -> None:
    declared = framing.format(n=len(case.whole))
    raw.script = RawScript([Body(case.whole)], framing=declared)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
    got, broke = await fetch(client, PATHS[case])
    assert (got, broke) == (case.whole, False)
    record = (await logs.wait())[0]
    assert (record["state"], record["http_complete"]) == (case.outcome, True)


async def test_idle_timeout_mid_body_is_interrupted(raw, aiohttp_client, logs) -> None:
    """The proxy's own cut: the upstream stalls after the finish_reason chunk."""
    raw.script = RawScript([Body(CHAT.decided), Pause(5)])
    settings = load(None, {}, {"upstream": raw.url, "idle_timeout": 0.3})
    client = await aiohttp_client(create_app(settings))
    got, broke = await fetch(client, PATHS[CHAT])
    assert (got, broke) == (CHAT.decided, True)
    record = (await logs.wait())[0]
    assert (record["state"], record["interruption"]["reason"], record["http_complete"]) == (
        "interrupted",
        "idle_timeout",
        False,
    )


async def test_client_leaving_after_the_stop_reason_keeps_the_outcome(
    raw, aiohttp_client, logs
) -> None:
    """LiteLLM's SDK closes right after Anthropic's `message_delta`, before `message_stop`."""
    raw.script = RawScript([Body(ANTHROPIC.decided), Pause(5), Body(ANTHROPIC.marker)])
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
    async with client.post(PATHS[ANTHROPIC], json={}) as response:
        got = b""
        while not got.endswith(ANTHROPIC.decided[-40:]):
            got += await response.content.readany()
    record = (await logs.wait())[0]
    assert (record["state"], record["finish_reason"]) == ("completed", "end_turn")
    assert record["interruption"]["reason"] == "client_disconnected"
    assert record["anomalies"]["client_left_before_end"] == 1


async def test_a_capture_of_a_truncated_body_replays_as_interrupted(
    raw, aiohttp_client, logs, tmp_path
) -> None:
    """Only the HTTP framing says this Chat body was cut: the capture keeps that fact, and
    `replay` of the capture reproduces the verdict (a replay of the bare body could not)."""
    raw.script = RawScript([Body(CHAT.decided), Hangup()])
    settings = load(None, {}, {"upstream": raw.url, "capture_dir": str(tmp_path)})
    client = await aiohttp_client(create_app(settings))
    await fetch(client, PATHS[CHAT])
    record = (await logs.wait())[0]
    _, sidecar, body = await captured(client, tmp_path)
    assert (body, sidecar["http_complete"]) == (CHAT.decided, False)
    out = io.StringIO()
    assert replay(body, ReplayOptions(), out, capture=sidecar) == 1
    replayed = json.loads(out.getvalue().splitlines()[-1])
    assert (replayed["state"], replayed["http_complete"]) == ("interrupted", False)
    assert replayed["state"] == record["state"]
    bare = io.StringIO()
    replay(body, ReplayOptions(), bare)  # the body alone looks whole
    assert json.loads(bare.getvalue().splitlines()[-1])["state"] == "completed"
