"""The bounds of what issue 31's dialects keep from a peer, each at the bound and one more:
A2A parts per artifact and artifact ids remembered, a failed task's status text, AG-UI usage
entries, Interactions step indexes and server tool calls, and a JSON-RPC method's length."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sseproxy.core import Dialect, State, StreamTap, TapOptions
from sseproxy.core.dialects import a2a, gemini_interactions
from sseproxy.core.dialects.base import MAX_INDEX, MAX_TOOL_CALLS
from sseproxy.core.mcp_request import MAX_METHOD_CHARS
from sseproxy.core.request import request_facts
from tests.streams import sse


def tap_of(data: bytes, dialect: Dialect) -> StreamTap:
    tap = StreamTap(dialect, options=TapOptions(strict=True))
    tap.feed(data)
    return tap


def rpc(result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "result": result}


def artifact(parts: int, artifact_id: str = "a1") -> dict[str, Any]:
    body = {"artifactId": artifact_id, "parts": [{"text": "x"}] * parts}
    return rpc({"artifactUpdate": {"taskId": "t", "artifact": body}})


@pytest.mark.parametrize(("parts", "over"), [(MAX_INDEX, 0), (MAX_INDEX + 1, 1)])
def test_a2a_parts_per_artifact_cap_and_one_more(parts: int, over: int) -> None:
    v = tap_of(sse(artifact(parts)), Dialect.A2A).close("end_of_input", http_complete=True)
    assert v.text_chars == MAX_INDEX if over else parts
    assert v.anomalies.get("index_out_of_range", 0) == over


@pytest.mark.parametrize("count", [a2a.MAX_ARTIFACTS, a2a.MAX_ARTIFACTS + 1])
def test_a2a_artifact_ids_remembered_cap_and_one_more(count: int) -> None:
    tap = tap_of(sse(*(artifact(1, f"a{i}") for i in range(count))), Dialect.A2A)
    assert tap.assembler is not None
    assert len(tap.assembler.streamed) == a2a.MAX_ARTIFACTS  # type: ignore[attr-defined]


@pytest.mark.parametrize("chars", [1024, 1025])
def test_a2a_failed_status_text_is_kept_up_to_1024_chars(chars: int) -> None:
    message = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "e" * chars}]}
    status = {"state": "TASK_STATE_FAILED", "message": message}
    data = sse(rpc({"statusUpdate": {"taskId": "t", "status": status}}))
    v = tap_of(data, Dialect.A2A).close("end_of_input", http_complete=True)
    assert v.state is State.FAILED
    assert v.error is not None and v.error.message == "e" * min(chars, 1024)


@pytest.mark.parametrize(("index", "kept"), [(MAX_INDEX - 1, True), (MAX_INDEX, False)])
def test_interactions_step_index_cap_and_one_more(index: int, kept: bool) -> None:
    delta = {"event_type": "step.delta", "index": index, "delta": {"type": "text", "text": "x"}}
    v = tap_of(sse(delta), Dialect.GEMINI_INTERACTIONS).close("end_of_input", http_complete=True)
    assert (v.text_chars, "index_out_of_range" in v.anomalies) == (int(kept), not kept)


@pytest.mark.parametrize("count", [MAX_TOOL_CALLS, MAX_TOOL_CALLS + 1])
def test_interactions_server_tool_calls_cap_and_one_more(count: int) -> None:
    start = {"event_type": "step.start", "index": 0, "step": {"type": "google_search_call"}}
    tap = tap_of(sse(*([start] * count)), Dialect.GEMINI_INTERACTIONS)
    v = tap.close("end_of_input", http_complete=True)
    assert len(v.server_tool_calls) == MAX_TOOL_CALLS
    assert gemini_interactions.SPEC.dialect is v.dialect


@pytest.mark.parametrize(("entries", "summed"), [(64, 64), (65, 64)])
def test_ag_ui_usage_entries_cap_and_one_more(entries: int, summed: int) -> None:
    usage = [{"inputTokens": 1}] * entries
    finished = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "usage": usage}
    v = tap_of(sse(finished), Dialect.AG_UI).close("end_of_input", http_complete=True)
    assert v.usage is not None and v.usage.input_tokens == summed


@pytest.mark.parametrize(
    ("length", "kept"), [(MAX_METHOD_CHARS, True), (MAX_METHOD_CHARS + 1, False)]
)
def test_rpc_method_length_cap_and_one_more(length: int, kept: bool) -> None:
    """Past the cap no method is kept, so none selects MCP or A2A."""
    method = "message/stream" + "m" * (length - len("message/stream"))
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method}).encode()
    assert (request_facts("/", "", body).rpc_method == method) is kept
