"""MCP by protocol version: the version a request names (the `MCP-Protocol-Version` header, or
`initialize`'s `protocolVersion`, or `_meta`) decides the rules its response is judged by.

Wire shapes written from the specification, modelcontextprotocol/modelcontextprotocol:
`docs/specification/2026-07-28/changelog.mdx` (sessions and resumability removed, `resultType`,
`subscriptions/listen`, `HeaderMismatch` -32020), `.../2026-07-28/basic/transports/
streamable-http.mdx` (closing the response stream is the cancellation) and
`.../2025-06-18/basic/lifecycle.mdx` (the unsupported-version error and its `data.supported`);
the error codes as the `mcp` SDK (2.3) declares them in `mcp_types.jsonrpc`: HEADER_MISMATCH
-32020, MISSING_REQUIRED_CLIENT_CAPABILITY -32021, UNSUPPORTED_PROTOCOL_VERSION -32022.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sseproxy.core import Dialect, EndReason, FinishCategory, State, StreamTap
from sseproxy.core.dialects import spec_for
from sseproxy.core.dialects.mcp import client_close
from sseproxy.core.request import request_facts
from sseproxy.core.verdict import ClientClose, with_transport
from tests.streams import verdict_of

MCP = Dialect.MCP
NEW, OLD = "2026-07-28", "2025-06-18"


def call(version_in_meta: str | None = None, rpc_id: int = 7, **params: Any) -> dict[str, Any]:
    body_params: dict[str, Any] = {"name": "echo", "arguments": {"text": "hi", "n": 1}, **params}
    if version_in_meta:
        body_params["_meta"] = {"io.modelcontextprotocol/protocolVersion": version_in_meta}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": body_params}


def asked(body: dict[str, Any], header: str | None = None) -> Any:
    return request_facts("/mcp", "", json.dumps(body).encode(), mcp_version=header)


def ev(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


PROGRESS = ev(
    {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": 1},
    }
)
RESULT = ev(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"resultType": "complete", "content": [{"type": "text", "text": "hi"}]},
    }
)
# SEP-2322: the server asks for input; the client calls again with `inputResponses`.
INPUT_REQUIRED = ev(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "resultType": "input_required",
            "inputRequests": {
                "confirm": {
                    "method": "elicitation/create",
                    "params": {"message": "Proceed?", "requestedSchema": {"type": "object"}},
                }
            },
            "requestState": "opaque-1",
        },
    }
)


# -- the version ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "header", "version"),
    [
        (call(), NEW, NEW),
        (call(), OLD, OLD),
        (call(version_in_meta=NEW), None, NEW),
        (
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": OLD, "capabilities": {}},
            },
            None,
            OLD,
        ),
        (call(), None, None),
        (call(), "not-a-date", None),
        # A `protocolVersion` param of any other method is no version statement.
        (
            {"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"protocolVersion": NEW}},
            None,
            None,
        ),
    ],
)
def test_the_version_is_the_header_or_the_body(body: Any, header: Any, version: Any) -> None:
    facts = asked(body, header)
    assert facts.mcp_version == version
    assert facts.mcp_stateless is (version == NEW)


def test_a_non_json_rpc_body_names_no_version() -> None:
    facts = request_facts(
        "/v1/chat", "", b'{"model": "m", "params": {"_meta": {}}}', mcp_version=NEW
    )
    # The header alone still names it (the request may be an MCP GET with no body).
    assert facts.mcp_version == NEW and facts.rpc_method is None and facts.mcp_call is None


# -- a client close -----------------------------------------------------------------------------


def closed_by_client(facts: Any, data: bytes = PROGRESS) -> Any:
    tap = StreamTap(MCP, request=facts)
    tap.feed(data)
    verdict = tap.close(EndReason.CLIENT_DISCONNECTED, http_complete=None)
    rule = spec_for(MCP).on_client_close(facts)
    return with_transport(verdict, 200, EndReason.CLIENT_DISCONNECTED, rule)


def test_under_2026_07_28_a_client_close_is_the_cancellation() -> None:
    v = closed_by_client(asked(call(), NEW))
    assert v.state is State.CANCELLED
    assert v.interruption is not None and v.interruption.reason == "client_disconnected"


def test_under_2025_06_18_a_client_close_stays_interrupted() -> None:
    for facts in (asked(call(), OLD), asked(call())):
        assert closed_by_client(facts).state is State.INTERRUPTED


def test_a_listen_stream_closed_by_its_client_ended_normally() -> None:
    listen = {"jsonrpc": "2.0", "id": 3, "method": "subscriptions/listen", "params": {}}
    facts = asked(listen, NEW)
    assert client_close(facts) is ClientClose.ENDS
    v = closed_by_client(facts, b": keep-alive\n\n" + PROGRESS)
    assert (v.state, v.finish_reason, v.finish_category) == (
        State.COMPLETED,
        "client_closed",
        FinishCategory.STOP,
    )
    assert v.interruption is not None and v.interruption.reason == "client_disconnected"
    assert "no_terminal_signal" not in v.anomalies


def test_a_listen_stream_the_server_closed_cleanly_is_no_missing_answer() -> None:
    listen = {"jsonrpc": "2.0", "id": 3, "method": "subscriptions/listen", "params": {}}
    v = verdict_of(PROGRESS, MCP, request=asked(listen, NEW))
    assert (v.state, v.finish_reason) == (State.COMPLETED, "listen_closed")
    assert v.anomalies == {}
    cut = verdict_of(
        PROGRESS, MCP, request=asked(listen, NEW), http_complete=False, end=EndReason.UPSTREAM_RESET
    )
    assert cut.state is State.INTERRUPTED  # a reset is still a cut


# -- results --------------------------------------------------------------------------------------


def test_input_required_is_a_pause_not_completed() -> None:
    v = verdict_of(PROGRESS + INPUT_REQUIRED, MCP, request=asked(call(), NEW))
    assert (v.state, v.finish_reason, v.finish_category) == (
        State.INCOMPLETE,
        "input_required",
        FinishCategory.PAUSE,
    )


def test_a_complete_result_completes() -> None:
    v = verdict_of(PROGRESS + RESULT, MCP, request=asked(call(), NEW))
    assert (v.state, v.text_chars) == (State.COMPLETED, 2)


def test_nothing_resumes_under_2026_07_28() -> None:
    assert spec_for(MCP).resumable(asked(call(), OLD))
    assert not spec_for(MCP).resumable(asked(call(), NEW))


# -- the call's identity for a retry ----------------------------------------------------------


def test_a_retry_keeps_its_call_identity_under_a_new_id() -> None:
    first = asked(call(rpc_id=7), NEW)
    again = asked(
        {**call(rpc_id=8), "params": {"arguments": {"n": 1, "text": "hi"}, "name": "echo"}}, NEW
    )
    other = asked(call(rpc_id=9, arguments={"text": "bye"}), NEW)
    assert first.mcp_call is not None
    assert again.mcp_call == first.mcp_call  # new id, same call (keys in another order)
    assert other.mcp_call != first.mcp_call
    round_trip = asked(call(rpc_id=10, inputResponses={"confirm": {"action": "accept"}}), NEW)
    assert round_trip.mcp_round_trip and round_trip.mcp_call == first.mcp_call


# -- refusals before the stream -----------------------------------------------------------------


def refusal(error: dict[str, Any], facts: Any) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    v = verdict_of(body, MCP, request=facts, content_type="application/json")
    return with_transport(v, 400, EndReason.END_OF_INPUT)


def test_header_mismatch_is_named() -> None:
    error = {"code": -32020, "message": "Mcp-Method header does not match the body"}
    v = refusal(error, asked(call(), NEW))
    assert (v.state, v.finish_reason) == (State.HTTP_ERROR, "header_mismatch")
    assert v.error is not None and v.error.code == "-32020"


@pytest.mark.parametrize(
    ("error", "version"),
    [
        # 2026-07-28: its own code, `data` as UnsupportedProtocolVersionErrorData.
        (
            {
                "code": -32022,
                "message": "x",
                "data": {"supported": [NEW], "requested": "2027-01-01"},
            },
            "2027-01-01",
        ),
        # A server before 2026-07-28 refusing a 2026-07-28 client (the lifecycle spec's shape).
        (
            {
                "code": -32602,
                "message": "Unsupported protocol version",
                "data": {"supported": [OLD], "requested": NEW},
            },
            NEW,
        ),
        # The TypeScript SDK's message, with no data.
        ({"code": -32000, "message": "Bad Request: Unsupported protocol version"}, NEW),
    ],
)
def test_an_unsupported_version_is_named(error: Any, version: str) -> None:
    v = refusal(error, asked(call(), version))
    assert (v.state, v.finish_reason) == (State.HTTP_ERROR, "unsupported_protocol_version")


def test_a_missing_capability_is_named() -> None:
    v = refusal(
        {"code": -32021, "message": "x", "data": {"requiredCapabilities": {}}}, asked(call(), NEW)
    )
    assert v.finish_reason == "missing_client_capability"


def test_other_errors_are_not_named() -> None:
    v = refusal({"code": -32020, "message": "server error"}, asked(call(), OLD))
    assert v.finish_reason is None
