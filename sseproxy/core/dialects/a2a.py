"""A2A (Agent2Agent) streaming: JSON-RPC 2.0 responses over SSE, each wrapping one task event.

v1.0 (`SendStreamingMessage`, `SubscribeToTask`): each `data:` is a JSON-RPC response whose
`result` is a StreamResponse holding exactly one of `task`, `message`, `statusUpdate`,
`artifactUpdate`; states are `TASK_STATE_*`. 0.x (`message/stream`, `tasks/resubscribe`): the
`result` is the object itself, told by `kind` (`task`, `message`, `status-update`,
`artifact-update`), states are lower-case with hyphens and the last status update says
`final: true`. The HTTP+JSON binding (`/message:stream`, `/tasks/{id}:subscribe`) sends the
StreamResponse without the JSON-RPC envelope.

The stream ends when the task reaches a terminal state (`completed`; `failed`, `rejected`:
failed; `canceled`: cancelled) or an interrupted one (`input-required`, `auth-required`: a
pause, `incomplete` with that finish reason, not a failure), or with a `message` (completed).
A JSON-RPC `error` is failed. A stream that ends before any of these is `interrupted`: the
server owed the client the task's end. Artifact text parts and a message's text parts are the
text.
"""

from __future__ import annotations

from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, ident
from sseproxy.core.dialects.rpc import injected_rpc_error, is_a2a
from sseproxy.core.dialects.spec import DialectSpec, Drills
from sseproxy.core.events import SSEEvent
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect, ErrorInfo, FinishCategory, State

# The record's outcome of each state that ends a stream (names as 0.x spells them).
ENDS: dict[str, tuple[State, FinishCategory]] = {
    "completed": (State.COMPLETED, FinishCategory.STOP),
    "failed": (State.FAILED, FinishCategory.ERROR),
    "rejected": (State.FAILED, FinishCategory.ERROR),
    "canceled": (State.CANCELLED, FinishCategory.OTHER),
    "input-required": (State.INCOMPLETE, FinishCategory.PAUSE),
    "auth-required": (State.INCOMPLETE, FinishCategory.PAUSE),
}
RUNNING = frozenset({"submitted", "working"})
# v1.0's StreamResponse members and 0.x's kinds, to one name.
MEMBERS = {
    "task": "task",
    "message": "message",
    "msg": "message",  # 0.3's HTTP+JSON binding
    "statusUpdate": "status",
    "artifactUpdate": "artifact",
}
KINDS = {
    "task": "task",
    "message": "message",
    "status-update": "status",
    "artifact-update": "artifact",
}
# Artifact ids remembered per stream (real tasks have a handful).
MAX_ARTIFACTS = 1024
MESSAGE = "message"  # the finish reason of a stream that ended with a message


def state_name(value: Any) -> str | None:
    """`TASK_STATE_INPUT_REQUIRED` (v1.0) and `input-required` (0.x) are both `input-required`."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    name = value.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return name or None


def unwrap(result: Any) -> tuple[str, dict[str, Any]] | None:
    """(kind, payload) of one stream result in either shape; None when it is neither."""
    if not isinstance(result, dict):
        return None
    kind = result.get("kind")
    if isinstance(kind, str):
        name = KINDS.get(kind)
        return (name, result) if name is not None else None
    present = [key for key in MEMBERS if key in result]
    if len(present) == 1 and isinstance(result[present[0]], dict):
        return MEMBERS[present[0]], result[present[0]]
    return None  # none of them, or more than one (v1.0 says exactly one)


class A2AAssembler(Assembler):
    dialect = Dialect.A2A

    def __init__(self) -> None:
        super().__init__()
        self.state: str | None = None  # the task's last state
        self.ended: str | None = None  # the state (or `message`) that ended the stream
        self.final = False  # a 0.x status update said `final: true`
        self.streamed: set[Any] = set()  # artifact ids seen in updates (a snapshot repeats them)
        self.whole = False  # one JSON-RPC response, not a stream (`message/send`, `tasks/get`)

    def on_event(self, event: SSEEvent) -> None:
        if not event.data.strip():
            self.last_event = "empty"
            return
        obj = self.parse(event.data)
        if obj is None:
            self.last_event = "chunk"
            return
        self.on_message(obj)

    def on_body(self, body: Any) -> None:
        """A whole JSON-RPC response (`message/send`, `tasks/get`), or an error body."""
        if isinstance(body, dict) and "jsonrpc" in body:
            self.whole = True
            self.on_message(body)
        else:
            super().on_body(body)

    def on_message(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            self.anomalies["unexpected_payload"] += 1
            return
        if self.ended is not None:
            self.anomalies["events_after_terminal"] += 1
            return
        if "error" in obj and obj.get("error") is not None:
            self.last_event = "error"
            self.error = rpc_error(obj["error"])
            self.terminal = True
            self.ended = "error"
            return
        result = obj.get("result") if obj.get("jsonrpc") == "2.0" else obj
        unwrapped = unwrap(result)
        if unwrapped is None:
            self.last_event = "result" if "result" in obj else "chunk"
            self.anomalies["unexpected_payload"] += 1
            return
        kind, payload = unwrapped
        self.last_event = kind
        if kind == "message":
            self.add_parts(("message", ident(payload.get("messageId"))), payload.get("parts"))
            self.end(MESSAGE)
        elif kind == "artifact":
            artifact = payload.get("artifact")
            if isinstance(artifact, dict):
                artifact_id = ident(artifact.get("artifactId"))
                if len(self.streamed) < MAX_ARTIFACTS:
                    self.streamed.add(artifact_id)
                self.add_parts(("artifact", artifact_id), artifact.get("parts"))
            self.on_status(None, payload.get("final") is True)
        elif kind == "status":
            self.on_status(payload.get("status"), payload.get("final") is True)
        else:  # a task snapshot: its state, and artifacts not streamed as updates
            if self.response_id is None and isinstance(payload.get("id"), str):
                self.response_id = payload["id"][:256]
            artifacts = payload.get("artifacts")
            for artifact in artifacts if isinstance(artifacts, list) else ():
                if isinstance(artifact, dict):
                    artifact_id = ident(artifact.get("artifactId"))
                    if artifact_id not in self.streamed:
                        self.add_parts(("artifact", artifact_id), artifact.get("parts"))
            self.on_status(payload.get("status"), False)

    def on_status(self, status: Any, final: bool) -> None:
        if isinstance(status, dict):
            name = state_name(status.get("state"))
            if name is not None:
                if name not in ENDS and name not in RUNNING:
                    self.anomalies["unknown_finish_reason"] += 1
                self.state = name
                if name in ENDS:
                    self.end(name)
                    if name in ("failed", "rejected"):
                        self.error = ErrorInfo(
                            type=f"task_{name}", code=None, message=status_text(status)
                        )
        if final and self.ended is None:
            self.final = self.terminal = True  # 0.x's end marker, on a state that ends nothing

    def end(self, how: str) -> None:
        self.ended = how
        self.terminal = True

    def add_parts(self, key: tuple[str, Any], parts: Any) -> None:
        for position, part in enumerate(parts if isinstance(parts, list) else ()):
            if isinstance(part, dict):
                if position >= 1024:
                    self.anomalies["index_out_of_range"] += 1
                    return
                self.add_text((*key, position), part.get("text"))

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        if self.ended == "error" or (self.error is not None and self.ended is None):
            return Outcome(State.FAILED, None, FinishCategory.ERROR)
        if self.ended == MESSAGE:
            return Outcome(State.COMPLETED, MESSAGE, FinishCategory.STOP)
        if self.ended is not None:
            state, category = ENDS[self.ended]
            return Outcome(state, self.ended, category)
        if self.whole and self.state is not None:
            # A task still running, answered whole (`returnImmediately`, `tasks/get`): the call
            # is answered; the client polls or subscribes for the rest.
            return Outcome(State.COMPLETED, self.state, FinishCategory.OTHER)
        if self.final:  # `final: true` on a running state: the server said nothing more comes
            if body_complete:
                self.anomalies["no_terminal_signal"] += 1
            return Outcome(State.UNCONFIRMED, self.state)
        if body_complete and not partial:
            # The server closed the stream before the task's end: the client is left waiting
            # (it must resubscribe), so the stream broke.
            self.anomalies["no_terminal_signal"] += 1
        return Outcome(State.INTERRUPTED, self.state)


def status_text(status: dict[str, Any]) -> str | None:
    """The text of a status update's message (why a task failed), bounded."""
    message = status.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return None
    texts = [
        p["text"] for p in parts[:16] if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]
    return " ".join(texts)[:1024] or None


def rpc_error(error: Any) -> ErrorInfo:
    if not isinstance(error, dict):
        return ErrorInfo(type="jsonrpc_error", code=None, message=None)
    code = error.get("code")
    message = error.get("message")
    return ErrorInfo(
        type="jsonrpc_error",
        code=str(code) if isinstance(code, int) and not isinstance(code, bool) else None,
        message=message if isinstance(message, str) else None,
    )


def sniff(obj: dict[str, Any]) -> bool:
    """A JSON-RPC response whose result is an A2A stream result (v1.0 or 0.x shape). A task
    must carry A2A's status object (MCP 2025-11-25's `{"task": {"status": "working"}}` has a
    string there)."""
    if obj.get("jsonrpc") != "2.0":
        return False
    unwrapped = unwrap(obj.get("result"))
    if unwrapped is None:
        return False
    kind, payload = unwrapped
    return kind != "task" or isinstance(payload.get("status"), dict)


def ends_stream(obj: Any) -> bool:
    """The message ends an A2A stream: an error, a message, or a state that ends the task."""
    if not isinstance(obj, dict):
        return False
    if obj.get("error") is not None:
        return True
    unwrapped = unwrap(obj.get("result") if obj.get("jsonrpc") == "2.0" else obj)
    if unwrapped is None:
        return False
    kind, payload = unwrapped
    status = payload.get("status")
    state = state_name(status.get("state")) if isinstance(status, dict) else None
    return kind == "message" or state in ENDS or payload.get("final") is True


def _ends(event: SSEEvent | None, raw: bytes) -> bool:
    """What `drop-terminal` removes."""
    if event is None:
        return False
    try:
        return ends_stream(loads(event.data))
    except ValueError:
        return False


SPEC = DialectSpec(
    dialect=Dialect.A2A,
    assembler=A2AAssembler,
    drills=Drills(is_terminal=_ends, error=injected_rpc_error, end_marker=b""),
    # The HTTP+JSON binding's streaming paths (JSON-RPC posts to the agent's URL, often `/`).
    path_suffixes=("/message:stream", ":subscribe"),
    selects=is_a2a,
    sniff=sniff,
    otel_operation="invoke_agent",
    otel_provider=None,
    # The task goes on when its client leaves (it resubscribes: `SubscribeToTask`,
    # `tasks/resubscribe`; `CancelTask` is the cancellation), so a disconnect cancels nothing.
    disconnect_cancels=False,
)
