"""MCP Streamable HTTP: JSON-RPC 2.0 messages, as one JSON body or as SSE events.

A POST's stream ends with the JSON-RPC response whose `id` is the request's: `result` is
`completed`, `error` is `failed` (its code and message kept). Requests and notifications the
server sends before it (progress, sampling) are not the end. An event with empty data is the
priming event a resumable server sends first (it carries only an `id`): not content, not an
anomaly. `notifications/cancelled` for the request is `cancelled`; a stream cut before the
response is `interrupted`, never `cancelled`: the spec says a disconnect is no cancellation,
so the client leaving does not make it one either (`disconnect_cancels=False`).

The request's protocol version decides the rules (`core/mcp_request.py`). From 2026-07-28 the
client closing the response stream *is* the cancellation (`cancelled`, the interruption's
reason `client_disconnected` says who), nothing resumes, a result with `resultType:
"input_required"` is a pause (`incomplete`, finish reason `input_required`, category `pause`:
the client calls again with `inputResponses`), and a `subscriptions/listen` stream stays open
until either side closes it: its close without an answer is its normal end (`completed`,
`client_closed` or `listen_closed`), never `interrupted` or `no_terminal_signal`. The refusals
before a stream are named (the codes of 2026-07-28, as the `mcp` SDK's `mcp_types.jsonrpc`
declares them): `header_mismatch` (400, -32020), `missing_client_capability` (400, -32021) and
`unsupported_protocol_version` (400, -32022; before 2026-07-28 an error whose `data` lists the
`supported` versions, as the lifecycle spec's example does, or whose message says so).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, ident
from sseproxy.core.dialects.rpc import injected_rpc_error, is_mcp
from sseproxy.core.dialects.spec import DialectSpec, Drills
from sseproxy.core.events import SSEEvent
from sseproxy.core.request import RequestFacts
from sseproxy.core.verdict import ClientClose, Dialect, ErrorInfo, FinishCategory, State

CANCELLED = "notifications/cancelled"
# The header a server names its session with; a request carries it back (never a secret the
# way `Authorization` is, so the record names it).
SESSION_HEADER = "mcp-session-id"
# A result that asks the client for input before the work goes on (MCP 2026-07-28, SEP-2322).
INPUT_REQUIRED = "input_required"
# The finish reason of a `subscriptions/listen` stream the server closed without an answer.
LISTEN_CLOSED = "listen_closed"
# 2026-07-28's codes for the refusals before any work (SEP-2243 and the changelog), by name.
STATELESS_REFUSALS = {
    -32020: "header_mismatch",  # the `Mcp-*` headers disagree with the body
    -32021: "missing_client_capability",
    -32022: "unsupported_protocol_version",
}
UNSUPPORTED_VERSION = "unsupported_protocol_version"


class McpAssembler(Assembler):
    dialect = Dialect.MCP

    def __init__(self) -> None:
        super().__init__()
        self.expected: str | int | None = None  # the JSON-RPC id of the request, when known
        self.done = False
        self.cancelled = False
        self.paused = False  # the result asked for input (`resultType: "input_required"`)
        self.refused: str | None = None  # a named refusal before the work (see the docstring)
        self.stateless = False
        self.listen = False

    def expect(self, request: RequestFacts) -> None:
        self.expected = request.rpc_id
        self.stateless = request.mcp_stateless
        self.listen = request.mcp_listen

    def on_event(self, event: SSEEvent) -> None:
        if not event.data.strip():
            self.last_event = "priming"  # a resumable server's first event: only its id
            return
        obj = self.parse(event.data)
        if obj is not None:
            self.on_body(obj)

    def on_body(self, body: Any) -> None:
        for message in body if isinstance(body, list) else (body,):
            if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
                self.on_message(message)
            else:
                self.anomalies["unexpected_payload"] += 1

    def on_message(self, message: dict[str, Any]) -> None:
        if self.done:
            self.anomalies["events_after_terminal"] += 1
            return
        method = message.get("method")
        if isinstance(method, str):
            self.last_event = method
            params = message.get("params")
            target = ident(params.get("requestId")) if isinstance(params, dict) else None
            if method == CANCELLED and (self.expected is None or target == self.expected):
                self.cancelled = self.done = self.terminal = True
            return  # a server request or notification: not the response
        if "result" not in message and "error" not in message:
            self.anomalies["unexpected_payload"] += 1
            return
        rid = ident(message.get("id"))
        # An error with a null id answers a request the server could not read: this one.
        unread = rid is None and "error" in message
        if self.expected is not None and rid != self.expected and not unread:
            self.last_event = "response"
            self.anomalies["unexpected_payload"] += 1  # a response to another request
            return
        self.done = self.terminal = True
        if "error" in message:
            self.last_event = "error"
            self.error = _rpc_error(message["error"])
            self.refused = _refusal(message["error"], self.stateless)
            return
        self.last_event = "result"
        result = message.get("result")
        if isinstance(result, dict) and result.get("resultType") == INPUT_REQUIRED:
            self.paused = True
        content = result.get("content") if isinstance(result, dict) else None
        for position, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, dict) and part.get("type") == "text":
                self.add_text((0, position), part.get("text"))

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        if self.error is not None:
            return Outcome(State.FAILED, self.refused, FinishCategory.ERROR)
        if self.cancelled:
            return Outcome(State.CANCELLED, CANCELLED, FinishCategory.OTHER)
        if self.done and self.paused:
            return Outcome(State.INCOMPLETE, INPUT_REQUIRED, FinishCategory.PAUSE)
        if self.done:
            return Outcome(State.COMPLETED, None, FinishCategory.STOP)
        if self.listen and body_complete and not partial:
            return Outcome(State.COMPLETED, LISTEN_CLOSED, FinishCategory.STOP)
        if body_complete and not partial:
            # The server closed the stream before the response: a client reconnects (GET +
            # Last-Event-ID) to get it, so nothing answered here.
            self.anomalies["no_terminal_signal"] += 1
            return Outcome(State.UNCONFIRMED)
        return Outcome(State.INTERRUPTED)


def session_findings(status: int | None, session_id: str | None) -> Counter[str]:
    """A 404 to a request that named a session: the server ended it (the client must start a
    new one with `initialize`), which a plain 404 would hide."""
    anomalies: Counter[str] = Counter()
    if status == 404 and session_id:
        anomalies["session_expired"] += 1
    return anomalies


def _refusal(error: Any, stateless: bool) -> str | None:
    """The name of a refusal the spec defines, else None."""
    if not isinstance(error, dict):
        return None
    code, message, data = error.get("code"), error.get("message"), error.get("data")
    text = message.lower() if isinstance(message, str) else ""
    if stateless and isinstance(code, int) and code in STATELESS_REFUSALS:
        return STATELESS_REFUSALS[code]
    if (isinstance(data, dict) and isinstance(data.get("supported"), list)) or (
        "unsupported protocol version" in text
    ):
        return UNSUPPORTED_VERSION
    return None


def client_close(asked: RequestFacts) -> ClientClose:
    """A listen stream ends when either side closes it; a stateless request is cancelled by
    its client's close; before 2026-07-28 a disconnect is no cancellation."""
    if asked.mcp_listen:
        return ClientClose.ENDS
    return ClientClose.CANCELS if asked.mcp_stateless else ClientClose.INTERRUPTS


def _rpc_error(error: Any) -> ErrorInfo:
    if not isinstance(error, dict):
        return ErrorInfo(type="jsonrpc_error", code=None, message=None)
    code = error.get("code")
    message = error.get("message")
    return ErrorInfo(
        type="jsonrpc_error",
        code=str(code) if isinstance(code, int) and not isinstance(code, bool) else None,
        message=message if isinstance(message, str) else None,
    )


def _is_response(event: SSEEvent | None, raw: bytes) -> bool:
    return b'"result"' in raw or b'"error"' in raw


SPEC = DialectSpec(
    dialect=Dialect.MCP,
    assembler=McpAssembler,
    drills=Drills(is_terminal=_is_response, error=injected_rpc_error, end_marker=b""),
    path_suffixes=("/mcp", "/mcp/"),
    response_headers=(SESSION_HEADER,),
    selects=is_mcp,  # an MCP method or `MCP-Protocol-Version`; never the response shape
    otel_operation=None,
    disconnect_cancels=False,
    client_close=client_close,
    # Before 2026-07-28 a cut stream resumes with GET + Last-Event-ID; from it, never.
    resumable=lambda asked: not asked.mcp_stateless,
)
