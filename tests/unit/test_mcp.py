"""MCP Streamable HTTP: JSON-RPC over SSE or a JSON body; the response with the request's id
ends the stream; priming events, server notifications, cancellation, disconnects, sessions."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, EndReason, FinishCategory, State, StreamTap, TapOptions
from sseproxy.core.dialects import detect, sniff_body
from sseproxy.core.dialects.mcp import session_findings
from sseproxy.core.inject import Injector, Write, parse_rules
from sseproxy.core.request import request_facts
from sseproxy.core.verdict import with_transport
from tests.streams import cut, verdict_of

MCP = Dialect.MCP
CALL = json.dumps(
    {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}}
).encode()
ASKED = request_facts("/mcp", "", CALL)


def ev(obj: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"{head}data: {data}\n\n".encode()


PRIMING = b"id: s1-0\nretry: 1500\ndata:\n\n"
PROGRESS = ev(
    {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": 1},
    },
    "s1-1",
)
RESULT = ev(
    {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "hello"}]}},
    "s1-2",
)
ERROR = ev({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "bad tool"}}, "s1-2")


def mcp(data: bytes, **kw: Any) -> Any:
    return verdict_of(data, MCP, request=ASKED, **kw)


def test_the_response_with_the_request_id_completes_the_stream() -> None:
    v = mcp(PRIMING + PROGRESS + RESULT)
    assert (v.state, v.finish_category, v.text_chars) == (State.COMPLETED, FinishCategory.STOP, 5)
    assert v.last_event == "result" and v.last_event_id == "s1-2"
    assert v.anomalies == {}  # the priming event with empty data is no anomaly


def test_a_json_rpc_error_fails_with_its_code_and_message() -> None:
    v = mcp(PRIMING + ERROR)
    assert v.state is State.FAILED
    assert v.error is not None and (v.error.code, v.error.message) == ("-32602", "bad tool")


def test_a_response_to_another_id_is_not_the_end() -> None:
    other = ev({"jsonrpc": "2.0", "id": 8, "result": {}}, "s1-2")
    v = mcp(PRIMING + other, http_complete=False, end=EndReason.UPSTREAM_CLOSED)
    assert v.state is State.INTERRUPTED
    assert v.anomalies.get("unexpected_payload") == 1


def test_notifications_alone_then_a_cut_is_interrupted() -> None:
    v = mcp(PRIMING + PROGRESS, end=EndReason.UPSTREAM_RESET, http_complete=False)
    assert v.state is State.INTERRUPTED


def test_a_stream_closed_cleanly_before_the_response_is_unconfirmed() -> None:
    v = mcp(PRIMING + PROGRESS)
    assert v.state is State.UNCONFIRMED and v.anomalies["no_terminal_signal"] == 1


def test_notifications_cancelled_for_the_request_is_cancelled() -> None:
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
    v = mcp(PRIMING + ev(cancel, "s1-2"))
    assert v.state is State.CANCELLED and v.finish_reason == "notifications/cancelled"
    other = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
    assert mcp(PRIMING + ev(other, "s1-2")).state is State.UNCONFIRMED


def test_a_client_disconnect_before_the_response_is_interrupted_not_cancelled() -> None:
    tap = StreamTap(MCP, request=ASKED)
    tap.feed(PRIMING + PROGRESS)
    v = tap.close(EndReason.CLIENT_DISCONNECTED, http_complete=None)
    assert v.state is State.INTERRUPTED
    assert with_transport(v, 200, EndReason.CLIENT_DISCONNECTED, False).state is State.INTERRUPTED
    assert with_transport(v, 200, EndReason.CLIENT_DISCONNECTED).state is State.CANCELLED


def test_a_json_body_response_completes() -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"tools": []}}).encode()
    v = mcp(body, content_type="application/json")
    assert v.state is State.COMPLETED


def test_the_retry_field_is_recorded() -> None:
    tap = StreamTap(MCP, request=ASKED)
    for i in range(len(PRIMING)):
        tap.feed(PRIMING[i : i + 1])
    assert tap.retry_ms == 1500


def test_detection_by_path_header_and_sniffing() -> None:
    assert detect("POST", "/mcp") is MCP
    assert detect("POST", "/x", {"Mcp-Session-Id": "abc"}) is MCP
    # Issue 31: a JSON-RPC response alone is no longer MCP (A2A speaks JSON-RPC too); the
    # request's method or its `MCP-Protocol-Version` header claims the stream.
    assert sniff_body({"jsonrpc": "2.0", "id": 1, "result": {}}) is None
    assert detect("POST", "/", {}, ASKED) is MCP  # tools/call
    versioned = request_facts("/", "", b"{}", mcp_version="2025-06-18")
    assert detect("POST", "/", {}, versioned) is MCP
    other = request_facts("/", "", b'{"jsonrpc": "2.0", "id": 1, "method": "x/y"}')
    assert detect("POST", "/", {}, other) is None
    assert detect("POST", "/v1/chat/completions") is Dialect.OPENAI_CHAT


def test_the_request_id_is_taken_from_a_json_rpc_body_only() -> None:
    assert ASKED.rpc_id == 7
    assert request_facts("/mcp", "", b'{"id": 7, "model": "m"}').rpc_id is None
    assert request_facts("/mcp", "", b'{"jsonrpc": "2.0", "id": true}').rpc_id is None


def test_a_404_on_a_session_is_session_expired() -> None:
    assert session_findings(404, "s-1") == {"session_expired": 1}
    assert session_findings(404, None) == {}
    assert session_findings(200, "s-1") == {}


def test_events_after_the_response_are_counted() -> None:
    v = mcp(PRIMING + RESULT + PROGRESS)
    assert v.state is State.COMPLETED and v.anomalies["events_after_terminal"] == 1


STREAMS = [
    PRIMING + PROGRESS + RESULT,
    PRIMING + ERROR,
    PRIMING + PROGRESS,
    PROGRESS + RESULT[:-3],
]


@given(st.sampled_from(STREAMS), st.lists(st.integers(min_value=0), max_size=10))
def test_any_chunking_gives_the_same_verdict(data: bytes, points: list[int]) -> None:
    def run(chunks: list[bytes]) -> Any:
        tap = StreamTap(MCP, request=ASKED, options=TapOptions(strict=True, ledger_events=8))
        for chunk in chunks:
            tap.feed(chunk)
        return tap.close(EndReason.UPSTREAM_CLOSED), tap.ledger(), tap.retry_ms

    assert run(cut(data, points)) == run([data])


def drill(rules: str, data: bytes) -> bytes:
    injector = Injector(parse_rules(rules), MCP)
    steps = []
    for i in range(0, len(data), 11):
        steps += injector.feed(data[i : i + 11])
    steps += injector.finish()
    return b"".join(s.data for s in steps if isinstance(s, Write))


def test_drill_drop_terminal_leaves_no_response() -> None:
    """The server closed before the response: a client reconnects for it, so nothing here
    confirms an answer (and nothing was cut)."""
    v = mcp(drill("drop-terminal", PRIMING + PROGRESS + RESULT))
    assert (v.state, v.last_event) == (State.UNCONFIRMED, "notifications/progress")


def test_drill_inject_error_fails() -> None:
    v = mcp(drill("inject-error=1", PRIMING + PROGRESS + RESULT))
    assert v.state is State.FAILED and v.error is not None
    assert v.error.code == "-32603"
