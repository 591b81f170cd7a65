"""MCP Streamable HTTP: JSON-RPC 2.0 messages, as one JSON body or as SSE events.

A POST's stream ends with the JSON-RPC response whose `id` is the request's: `result` is
`completed`, `error` is `failed` (its code and message kept). Requests and notifications the
server sends before it (progress, sampling) are not the end. An event with empty data is the
priming event a resumable server sends first (it carries only an `id`): not content, not an
anomaly. `notifications/cancelled` for the request is `cancelled`; a stream cut before the
response is `interrupted`, never `cancelled`: the spec says a disconnect is no cancellation,
so the client leaving does not make it one either (`disconnect_cancels=False`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, ident
from sseproxy.core.dialects.rpc import is_mcp
from sseproxy.core.dialects.spec import DialectSpec, Drills, sse_event
from sseproxy.core.events import SSEEvent
from sseproxy.core.request import RequestFacts
from sseproxy.core.verdict import Dialect, ErrorInfo, FinishCategory, State

CANCELLED = "notifications/cancelled"
# The header a server names its session with; a request carries it back (never a secret the
# way `Authorization` is, so the record names it).
SESSION_HEADER = "mcp-session-id"


class McpAssembler(Assembler):
    dialect = Dialect.MCP

    def __init__(self) -> None:
        super().__init__()
        self.expected: str | int | None = None  # the JSON-RPC id of the request, when known
        self.done = False
        self.cancelled = False

    def expect(self, request: RequestFacts) -> None:
        self.expected = request.rpc_id

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
            return
        self.last_event = "result"
        result = message.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        for position, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, dict) and part.get("type") == "text":
                self.add_text((0, position), part.get("text"))

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        if self.error is not None:
            return Outcome(State.FAILED, None, FinishCategory.ERROR)
        if self.cancelled:
            return Outcome(State.CANCELLED, CANCELLED, FinishCategory.OTHER)
        if self.done:
            return Outcome(State.COMPLETED, None, FinishCategory.STOP)
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


def _injected_error(sequence_number: int) -> bytes:
    error = {"code": -32603, "message": "Internal error (injected)"}
    return sse_event({"jsonrpc": "2.0", "id": None, "error": error})


SPEC = DialectSpec(
    dialect=Dialect.MCP,
    assembler=McpAssembler,
    drills=Drills(is_terminal=_is_response, error=_injected_error, end_marker=b""),
    path_suffixes=("/mcp", "/mcp/"),
    response_headers=(SESSION_HEADER,),
    selects=is_mcp,  # an MCP method or `MCP-Protocol-Version`; never the response shape
    otel_operation=None,
    disconnect_cancels=False,
    resumable=lambda asked: True,  # a cut stream resumes with GET + Last-Event-ID
)
