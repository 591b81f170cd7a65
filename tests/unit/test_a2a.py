"""A2A streaming (issue 31, point 1): both wire shapes, every state mapped to the record's, the
request's method selecting the dialect, and MCP no longer claiming every JSON-RPC stream.

Wire shapes come from the `a2a-sdk` package (1.3): v1.0 events are its protobuf types
(`a2a.types.a2a_pb2`) turned into JSON by `MessageToDict` inside a JSON-RPC response, exactly as
its server's `JsonRpcDispatcher._process_streaming_request` writes them; 0.3 events are its
compat models (`a2a.compat.v0_3.types`) dumped by alias, as its `jsonrpc_adapter` writes them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sseproxy.core import Dialect, EndReason, FinishCategory, State
from sseproxy.core.dialects import detect, sniff_body, spec_for
from sseproxy.core.inject import Injector, Write, parse_rules
from sseproxy.core.request import request_facts
from sseproxy.core.verdict import with_transport
from tests.streams import verdict_of

pb = pytest.importorskip("a2a.types.a2a_pb2")
v03 = pytest.importorskip("a2a.compat.v0_3.types")
json_format = pytest.importorskip("google.protobuf.json_format")

A2A = Dialect.A2A
TASK, CONTEXT = "task-1", "ctx-1"


def rpc(result: dict[str, Any], rid: int = 1) -> bytes:
    return (
        b"data: " + json.dumps({"result": result, "id": rid, "jsonrpc": "2.0"}).encode() + b"\n\n"
    )


# -- v1.0 ----------------------------------------------------------------------------------


def v1(**member: Any) -> bytes:
    """One v1.0 StreamResponse (exactly one member set) as the SDK's server writes it."""
    return rpc(json_format.MessageToDict(pb.StreamResponse(**member)))


def v1_task(state: int) -> bytes:
    status = pb.TaskStatus(state=state)
    return v1(task=pb.Task(id=TASK, context_id=CONTEXT, status=status))


def v1_status(state: int, text: str | None = None) -> bytes:
    message = None
    if text is not None:
        message = pb.Message(message_id="m2", role=pb.ROLE_AGENT, parts=[pb.Part(text=text)])
    status = pb.TaskStatus(state=state, message=message)
    event = pb.TaskStatusUpdateEvent(task_id=TASK, context_id=CONTEXT, status=status)
    return v1(status_update=event)


def v1_artifact(text: str) -> bytes:
    artifact = pb.Artifact(artifact_id="a1", parts=[pb.Part(text=text)])
    event = pb.TaskArtifactUpdateEvent(task_id=TASK, context_id=CONTEXT, artifact=artifact)
    return v1(artifact_update=event)


def v1_run(end: int, text: str | None = None) -> bytes:
    return (
        v1_task(pb.TASK_STATE_SUBMITTED)
        + v1_status(pb.TASK_STATE_WORKING)
        + v1_artifact("partial answer")
        + v1_status(end, text)
    )


# -- 0.3 -----------------------------------------------------------------------------------


def dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def v03_status(state: str, final: bool, text: str | None = None) -> bytes:
    message = None
    if text is not None:
        part = v03.Part(root=v03.TextPart(text=text))
        message = v03.Message(message_id="m2", role=v03.Role.agent, parts=[part])
    status = v03.TaskStatus(state=v03.TaskState(state), message=message)
    event = v03.TaskStatusUpdateEvent(
        task_id=TASK, context_id=CONTEXT, status=status, final=final, kind="status-update"
    )
    return rpc(dump(event), 2)


def v03_run(end: str, text: str | None = None) -> bytes:
    task = v03.Task(
        id=TASK,
        context_id=CONTEXT,
        status=v03.TaskStatus(state=v03.TaskState.submitted),
        kind="task",
    )
    artifact = v03.Artifact(
        artifact_id="a1", parts=[v03.Part(root=v03.TextPart(text="partial answer"))]
    )
    update = v03.TaskArtifactUpdateEvent(
        task_id=TASK, context_id=CONTEXT, artifact=artifact, kind="artifact-update"
    )
    return (
        rpc(dump(task), 2)
        + v03_status("working", False)
        + rpc(dump(update), 2)
        + v03_status(end, True, text)
    )


STREAMING = request_facts(
    "/",
    "",
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}).encode(),
)


def a2a(data: bytes, **kw: Any) -> Any:
    return verdict_of(data, A2A, request=STREAMING, **kw)


# -- states ----------------------------------------------------------------------------------


def test_a_task_that_goes_working_then_failed_is_failed_v1() -> None:
    """The issue's case: main recorded it `completed` after the first event."""
    v = a2a(v1_run(pb.TASK_STATE_FAILED, "tool crashed"))
    assert (v.state, v.finish_reason, v.finish_category) == (
        State.FAILED,
        "failed",
        FinishCategory.ERROR,
    )
    assert v.error is not None and v.error.message == "tool crashed"
    assert (v.text_chars, v.anomalies) == (len("partial answer"), {})


def test_a_task_that_goes_working_then_failed_is_failed_v03() -> None:
    v = a2a(v03_run("failed", "tool crashed"))
    assert (v.state, v.finish_reason) == (State.FAILED, "failed")
    assert v.error is not None and v.error.message == "tool crashed"
    assert (v.text_chars, v.anomalies) == (len("partial answer"), {})


@pytest.mark.parametrize(
    ("v1_state", "v03_state", "state", "category"),
    [
        (pb.TASK_STATE_COMPLETED, "completed", State.COMPLETED, FinishCategory.STOP),
        (pb.TASK_STATE_REJECTED, "rejected", State.FAILED, FinishCategory.ERROR),
        (pb.TASK_STATE_CANCELED, "canceled", State.CANCELLED, FinishCategory.OTHER),
        (pb.TASK_STATE_INPUT_REQUIRED, "input-required", State.INCOMPLETE, FinishCategory.PAUSE),
        (pb.TASK_STATE_AUTH_REQUIRED, "auth-required", State.INCOMPLETE, FinishCategory.PAUSE),
    ],
)
def test_each_ending_state_in_both_shapes(v1_state, v03_state, state, category) -> None:
    for data in (v1_run(v1_state), v03_run(v03_state)):
        v = a2a(data)
        assert (v.state, v.finish_reason, v.finish_category) == (state, v03_state, category)
        assert v.interruption is None


def test_a_stream_ending_with_a_message_is_completed() -> None:
    for message in (
        v1(message=pb.Message(message_id="m1", role=pb.ROLE_AGENT, parts=[pb.Part(text="hi")])),
        rpc(
            dump(
                v03.Message(
                    message_id="m1",
                    role=v03.Role.agent,
                    parts=[v03.Part(root=v03.TextPart(text="hi"))],
                    kind="message",
                )
            )
        ),
    ):
        v = a2a(message)
        assert (v.state, v.finish_reason, v.text_chars) == (State.COMPLETED, "message", 2)


def test_a_stream_closed_before_the_task_ended_is_interrupted() -> None:
    """A clean close after `working`: the client waits for an end that never comes."""
    for data in (
        v1_task(pb.TASK_STATE_SUBMITTED) + v1_status(pb.TASK_STATE_WORKING),
        v03_status("working", False),
    ):
        v = a2a(data)
        assert v.state is State.INTERRUPTED
        assert v.anomalies.get("no_terminal_signal") == 1


def test_a_cut_stream_is_interrupted_and_a_cut_after_the_end_keeps_it() -> None:
    whole = v1_run(pb.TASK_STATE_COMPLETED)
    cut = a2a(whole[:-40], end=EndReason.UPSTREAM_RESET, http_complete=False)
    assert cut.state is State.INTERRUPTED
    left = a2a(whole, end=EndReason.CLIENT_DISCONNECTED, http_complete=None)
    assert left.state is State.COMPLETED


def test_a_json_rpc_error_is_failed() -> None:
    # The SDK's server when the agent misbehaves (seen from `a2a-sdk` 1.3, -32006).
    error = {"code": -32006, "message": "Agent should enqueue Task before TaskStatusUpdateEvent"}
    data = b"data: " + json.dumps({"error": error, "id": 2, "jsonrpc": "2.0"}).encode() + b"\n\n"
    v = a2a(data)
    assert v.state is State.FAILED
    assert v.error is not None and (v.error.code, v.error.type) == ("-32006", "jsonrpc_error")


def test_events_after_the_end_are_counted() -> None:
    v = a2a(v1_run(pb.TASK_STATE_COMPLETED) + v1_status(pb.TASK_STATE_WORKING))
    assert v.state is State.COMPLETED and v.anomalies.get("events_after_terminal") == 1


def test_a_result_with_two_members_is_no_stream_result() -> None:
    both = {"task": {"id": TASK}, "message": {"messageId": "m"}}
    v = a2a(rpc(both) + v1_status(pb.TASK_STATE_COMPLETED))
    assert v.state is State.COMPLETED and v.anomalies.get("unexpected_payload") == 1


def test_a_whole_json_body_answering_message_send() -> None:
    body = {"result": {"task": {"id": TASK, "status": {"state": "TASK_STATE_COMPLETED"}}}}
    v = verdict_of(json.dumps({**body, "id": 1, "jsonrpc": "2.0"}).encode(), A2A, bytewise=False)
    assert (v.state, v.finish_reason) == (State.COMPLETED, "completed")


def test_a_running_task_answered_whole_is_an_answer_not_a_break() -> None:
    """`SendMessage` with `returnImmediately`, or `GetTask`: one JSON-RPC body, task working."""
    body = {"result": {"task": {"id": TASK, "status": {"state": "TASK_STATE_WORKING"}}}}
    v = verdict_of(json.dumps({**body, "id": 1, "jsonrpc": "2.0"}).encode(), A2A, bytewise=False)
    assert (v.state, v.finish_reason, v.anomalies) == (State.COMPLETED, "working", {})


# -- detection -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method", ["message/stream", "tasks/resubscribe", "SendStreamingMessage", "SubscribeToTask"]
)
def test_the_request_method_selects_a2a(method: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}).encode()
    assert detect("POST", "/", {}, request_facts("/", "", body)) is A2A


def test_paths_of_the_http_json_binding_select_a2a() -> None:
    assert detect("POST", "/v1/message:stream") is A2A
    assert detect("GET", "/v1/tasks/task-1:subscribe") is A2A


def test_the_result_shape_is_sniffed_in_both_versions() -> None:
    assert sniff_body(json.loads(v1_task(pb.TASK_STATE_SUBMITTED)[6:])) is A2A
    assert sniff_body(json.loads(v03_status("working", False)[6:])) is A2A
    # MCP 2025-11-25's task-augmented result (`CreateTaskResult`) is not A2A's task.
    mcp_task = {"task": {"taskId": "t", "status": "working", "createdAt": "2025-11-25T00:00:00Z"}}
    assert sniff_body({"jsonrpc": "2.0", "id": 1, "result": mcp_task}) is None


def test_without_a_request_the_issue_stream_is_still_a2a_and_failed() -> None:
    """Sniffed from the first event (no request facts, as `replay` reads a capture)."""
    v = verdict_of(v1_run(pb.TASK_STATE_FAILED, "tool crashed"))
    assert (v.dialect, v.state) == (A2A, State.FAILED)


def test_mcp_claims_only_mcp_requests() -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e"}}
    mcp_asked = request_facts("/", "", json.dumps(call).encode())
    result = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "x"}]}}
    data = b"data: " + json.dumps(result).encode() + b"\n\n"
    assert verdict_of(data, request=mcp_asked).dialect is Dialect.MCP
    header_only = request_facts("/", "", b"{}", mcp_version="2025-06-18")
    assert verdict_of(data, request=header_only).dialect is Dialect.MCP
    # An unknown JSON-RPC method: neither protocol is claimed (plain SSE, unconfirmed).
    other = request_facts("/", "", json.dumps({**call, "method": "x/y"}).encode())
    assert verdict_of(data, request=other).dialect is Dialect.SSE


# -- drills ----------------------------------------------------------------------------------


def drill(rules: str, data: bytes) -> bytes:
    injector = Injector(parse_rules(rules), A2A)
    out = b"".join(a.data for a in injector.feed(data) if isinstance(a, Write))
    return out + b"".join(a.data for a in injector.finish() if isinstance(a, Write))


def test_drill_drop_terminal_makes_it_interrupted() -> None:
    v = a2a(drill("drop-terminal", v1_run(pb.TASK_STATE_COMPLETED)))
    assert v.state is State.INTERRUPTED


def test_drill_inject_error_makes_it_failed() -> None:
    v = a2a(drill("inject-error=2", v1_run(pb.TASK_STATE_COMPLETED)))
    assert v.state is State.FAILED


def test_a_client_leaving_a_running_task_interrupts_it_but_cancels_nothing() -> None:
    """A2A tasks outlive their stream (the client resubscribes; `CancelTask` cancels)."""
    v = a2a(v1_task(pb.TASK_STATE_SUBMITTED), end=EndReason.CLIENT_DISCONNECTED, http_complete=None)
    cancels = spec_for(A2A).disconnect_cancels
    assert with_transport(v, 200, EndReason.CLIENT_DISCONNECTED, cancels).state is State.INTERRUPTED
