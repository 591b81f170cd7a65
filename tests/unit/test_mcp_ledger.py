"""The retry ledger under MCP 2026-07-28: a stateless request never resumes (no `Last-Event-ID`
link), a lost request re-issued under a new JSON-RPC id is linked as a retry by its call
(method, name, arguments), and a request answering `input_required` is the call's next round
trip. Wire shapes from modelcontextprotocol/modelcontextprotocol
`docs/specification/2026-07-28/changelog.mdx` ("clients MUST re-issue it as a new request with
a new request ID"; Multi Round-Trip Requests, SEP-2322)."""

from __future__ import annotations

import json
from typing import Any

from sseproxy.core import State
from sseproxy.core.request import request_facts
from sseproxy.core.resume import LedgerEvent
from sseproxy.shell.ledger import Ended, Ledger, LedgerLimits

NEW, OLD = "2026-07-28", "2025-06-18"


def body(rpc_id: int, **params: Any) -> bytes:
    call = {"name": "search", "arguments": {"q": "otel", "limit": 3}, **params}
    return json.dumps(
        {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": call}
    ).encode()


def ended(
    request_id: str,
    data: bytes,
    version: str,
    state: State = State.COMPLETED,
    finish_reason: str | None = None,
    **kw: Any,
) -> Ended:
    asked = request_facts("/mcp", "", data, mcp_version=version)
    fields: dict[str, Any] = {
        "request_id": request_id,
        "started": 0.0,
        "method": "POST",
        "path": "/mcp",
        "headers": {"MCP-Protocol-Version": version},
        "body": data,
        "route": "mcp",
        "session_id": None,
        "state": state,
        "response_id": None,
        "events": (),
        "delivered": 0,
        "retry_ms": None,
        "text": None,
        "finish_reason": finish_reason,
        "mcp_stateless": asked.mcp_stateless,
        "mcp_call": asked.mcp_call,
        "mcp_round_trip": asked.mcp_round_trip,
    }
    fields.update(kw)
    return Ended(**fields)


def test_a_stateless_call_re_issued_under_a_new_id_is_a_retry() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", body(1), NEW, State.CANCELLED), now=0.0)
    links = ledger.link(ended("q1", body(2), NEW), now=1.0)
    assert links.retry is not None and links.retry["of"] == "q0"
    assert links.resume is None


def test_before_2026_07_28_a_new_id_is_no_retry_as_today() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", body(1), OLD, State.INTERRUPTED), now=0.0)
    assert ledger.link(ended("q1", body(2), OLD), now=1.0).retry is None


def test_another_call_is_no_retry() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", body(1), NEW, State.CANCELLED), now=0.0)
    other = body(2, arguments={"q": "otel", "limit": 4})
    assert ledger.link(ended("q1", other, NEW), now=1.0).retry is None


def test_a_stateless_last_event_id_links_no_resume() -> None:
    ledger = Ledger(LedgerLimits())
    events = (LedgerEvent(1, "e1", None, "h1"), LedgerEvent(2, "e2", None, "h2"))
    ledger.link(ended("q0", body(1), NEW, State.CANCELLED, events=events), now=0.0)
    headers = {"MCP-Protocol-Version": NEW, "Last-Event-ID": "e1"}
    links = ledger.link(ended("q1", body(2), NEW, headers=headers), now=1.0)
    assert links.resume is None
    old = Ledger(LedgerLimits())  # the same under 2025-06-18 is a resume, as today
    old.link(ended("q0", body(1), OLD, State.INTERRUPTED, events=events), now=0.0)
    headers = {"MCP-Protocol-Version": OLD, "Last-Event-ID": "e1"}
    resumed = old.link(ended("q1", b"", OLD, method="GET", headers=headers), now=1.0)
    assert resumed.resume is not None and resumed.resume.of == "q0"


def test_input_required_round_trips_are_counted() -> None:
    ledger = Ledger(LedgerLimits())
    paused = {"state": State.INCOMPLETE, "finish_reason": "input_required"}
    ledger.link(ended("q0", body(1), NEW, **paused), now=0.0)
    answer = {"inputResponses": {"confirm": {"action": "accept"}}, "requestState": "s1"}
    second = ledger.link(ended("q1", body(2, **answer), NEW, **paused), now=1.0)
    assert second.round_trip == {"of": "q0", "number": 2}
    third = ledger.link(ended("q2", body(3, **answer), NEW), now=2.0)
    assert third.round_trip == {"of": "q1", "number": 3}
    assert third.retry is None
    # After a completed answer, another answer is no round trip of it.
    assert ledger.link(ended("q3", body(4, **answer), NEW), now=3.0).round_trip is None
