"""Every dialect knows its provider's current vocabulary: each event, delta, block and finish
reason that the installed official SDK declares is fed to the assembler, and none may come
out as `unknown_*`. When an SDK upgrade adds a type, this fails and names it.

The SDK versions these checks ran against are recorded in docs/DIALECTS.md."""

from __future__ import annotations

import gzip
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from sseproxy.core import Dialect, EndReason
from sseproxy.core.dialects import (
    a2a,
    ag_ui,
    bedrock_converse,
    cohere,
    gemini,
    gemini_interactions,
    openai_chat,
)
from tests.streams import sse, verdict_of


def literals(annotation: Any) -> set[str]:
    """Every string Literal inside a type annotation (unions, Optionals, Annotated)."""
    out: set[str] = set()
    if typing.get_origin(annotation) is typing.Literal:
        return {a for a in typing.get_args(annotation) if isinstance(a, str)}
    for arg in typing.get_args(annotation):
        out |= literals(arg)
    return out


def type_literals(union: Any) -> set[str]:
    """The `type` discriminator values of a pydantic model union."""
    out: set[str] = set()
    for model in typing.get_args(
        typing.get_args(union)[0] if typing.get_origin(union) is typing.Annotated else union
    ):
        field = model.model_fields.get("type")
        if field is not None:
            out |= literals(field.annotation)
    return out


# -- Anthropic Messages (anthropic-python, beta unions: the superset) -------------------------


def anthropic_types() -> tuple[set[str], set[str], set[str], set[str]]:
    from anthropic.types.beta import (
        BetaContentBlock,
        BetaRawContentBlockDelta,
        BetaRawMessageStreamEvent,
        BetaStopReason,
    )

    return (
        type_literals(BetaRawMessageStreamEvent),
        type_literals(BetaRawContentBlockDelta),
        type_literals(BetaContentBlock),
        literals(BetaStopReason),
    )


def test_anthropic_sdk_unions_are_what_we_expect() -> None:
    events, deltas, blocks, reasons = anthropic_types()
    assert "compaction_delta" in deltas and "compaction" in blocks and "compaction" in reasons
    assert "message_stop" in events


def anthropic_stream(block: str, delta: dict[str, Any], stop: str = "end_turn") -> bytes:
    return sse(
        ("message_start", {"type": "message_start", "message": {"id": "m", "usage": {}}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": block}},
        ),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}}),
        ("message_stop", {"type": "message_stop"}),
    )


@pytest.mark.parametrize("delta_type", sorted(anthropic_types()[1]))
def test_every_anthropic_delta_type_is_known(delta_type: str) -> None:
    v = verdict_of(anthropic_stream("text", {"type": delta_type}), Dialect.ANTHROPIC_MESSAGES)
    assert not {k for k in v.anomalies if k.startswith("unknown")}


@pytest.mark.parametrize("reason", sorted(anthropic_types()[3]))
def test_every_anthropic_stop_reason_is_known(reason: str) -> None:
    v = verdict_of(
        anthropic_stream("text", {"type": "text_delta", "text": "a"}, reason),
        Dialect.ANTHROPIC_MESSAGES,
    )
    assert "unknown_finish_reason" not in v.anomalies


def test_compaction_delta_is_counted_as_text() -> None:
    """Context compaction: the summary streams as `compaction_delta` and is shown by clients."""
    delta = {"type": "compaction_delta", "content": "Summary so far."}
    v = verdict_of(anthropic_stream("compaction", delta, "compaction"), Dialect.ANTHROPIC_MESSAGES)
    assert (v.text_chars, v.anomalies) == (len("Summary so far."), {})
    assert (v.state, v.finish_category) == ("incomplete", "pause")


# -- OpenAI Responses (openai-python ResponseStreamEvent) ---------------------------------------


def responses_event_types() -> set[str]:
    from openai.types.responses import ResponseStreamEvent

    return type_literals(ResponseStreamEvent)


@pytest.mark.parametrize("event_type", sorted(responses_event_types()))
def test_every_responses_event_type_is_known(event_type: str) -> None:
    v = verdict_of(sse((event_type, {"type": event_type})), Dialect.OPENAI_RESPONSES)
    assert "unknown_event_type" not in v.anomalies


# -- OpenAI Chat (finish reasons of ChatCompletionChunk) ---------------------------------------


def test_every_chat_finish_reason_is_known() -> None:
    from openai.types.chat.chat_completion_chunk import Choice

    reasons = literals(Choice.model_fields["finish_reason"].annotation)
    assert reasons and reasons <= set(openai_chat.NATURAL) | set(openai_chat.CUT_SHORT)


# -- Gemini (google-genai FinishReason) ---------------------------------------------------------


def test_every_gemini_finish_reason_has_a_category() -> None:
    from google.genai import types

    reasons = {r.value for r in types.FinishReason} - {"FINISH_REASON_UNSPECIFIED"}
    # Unusable or unexplained output: `incomplete` with category `other`, on purpose.
    other = {
        "OTHER",
        "LANGUAGE",
        "MALFORMED_FUNCTION_CALL",
        "MALFORMED_RESPONSE",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MISSING_THOUGHT_SIGNATURE",
        "IMAGE_OTHER",
        "NO_IMAGE",
    }
    assert reasons - set(gemini.CATEGORY) == other


# -- Cohere v2 (cohere-python V2ChatStreamResponse, ChatFinishReason) ---------------------------


def test_every_cohere_event_and_finish_reason_is_known() -> None:
    from cohere.types import ChatFinishReason
    from cohere.v2.types import V2ChatStreamResponse

    assert type_literals(V2ChatStreamResponse) == cohere.COHERE_EVENTS
    assert literals(ChatFinishReason) == set(cohere.FINISH_REASONS)


# -- Bedrock ConverseStream (botocore's bedrock-runtime service model) --------------------------


def bedrock_shapes() -> dict[str, Any]:
    import botocore

    root = Path(botocore.__file__).parent / "data" / "bedrock-runtime"
    [model] = sorted(root.glob("*/service-2.json*"))
    opener = gzip.open if model.suffix == ".gz" else open
    with opener(model, "rt") as f:
        shapes: dict[str, Any] = json.load(f)["shapes"]
    return shapes


def test_every_converse_event_delta_and_stop_reason_is_known() -> None:
    shapes = bedrock_shapes()
    members = set(shapes["ConverseStreamOutput"]["members"])
    events = {m for m in members if not m.endswith("Exception")}
    assert events == bedrock_converse.CONVERSE_EVENTS
    assert set(shapes["ContentBlockDelta"]["members"]) == bedrock_converse.KNOWN_DELTAS
    assert set(shapes["StopReason"]["enum"]) == set(bedrock_converse.STOP_REASONS)


# -- OpenAI Responses over a WebSocket (openai-python's beta BetaResponsesServerEvent) ----------


def responses_ws_event_types() -> set[str]:
    from openai.types.beta.beta_responses_server_event import BetaResponsesServerEvent

    return type_literals(BetaResponsesServerEvent)


def test_the_websocket_union_has_the_steering_answers() -> None:
    names = responses_ws_event_types()
    assert {"response.steer.accepted", "response.steer.pending", "response.steer.failed"} <= names


@pytest.mark.parametrize("event_type", sorted(responses_ws_event_types()))
def test_every_responses_websocket_event_type_is_known(event_type: str) -> None:
    """Each server event inside an open turn (a steering answer, an injection's, a lane's):
    none is `unknown_event_type`, on the turn or the session."""
    from sseproxy.core.sessions.responses import ResponsesJudge

    judge = ResponsesJudge()
    judge.client({"type": "response.create", "stream_id": "lane-1"})
    ended = []
    for event in (
        {"type": "response.created", "stream_id": "lane-1", "response": {"id": "r"}},
        {"type": event_type, "stream_id": "lane-1"},
    ):
        raw = json.dumps(event).encode()
        ended += judge.upstream(event, raw).ended
    ended += judge.close(EndReason.CLIENT_DISCONNECTED)
    assert "unknown_event_type" not in judge.anomalies
    assert all("unknown_event_type" not in t.verdict.anomalies for t in ended)


def test_every_incomplete_reason_of_a_websocket_response_has_its_category() -> None:
    from openai.types.beta.beta_response import IncompleteDetails

    from sseproxy.core.dialects import openai_responses

    reasons = literals(IncompleteDetails.model_fields["reason"].annotation)
    assert "steered" in reasons
    # max_messages: a limit the response does not say more of, `other` on purpose
    assert reasons - set(openai_responses.INCOMPLETE_CATEGORY) == {"max_messages"}
    assert openai_responses.INCOMPLETE_CATEGORY["steered"] == "pause"


# -- A2A (a2a-sdk 1.3: v1.0 protobuf types and the 0.3 compat models) ---------------------------


def test_every_a2a_task_state_and_stream_member_is_known() -> None:
    pb = pytest.importorskip("a2a.types.a2a_pb2")
    v03 = pytest.importorskip("a2a.compat.v0_3.types")
    values = pb.TaskState.DESCRIPTOR.values
    names = {a2a.state_name(v.name) for v in values if v.name != "TASK_STATE_UNSPECIFIED"}
    assert names == set(a2a.ENDS) | a2a.RUNNING
    assert {s.value for s in v03.TaskState} - {"unknown"} == set(a2a.ENDS) | a2a.RUNNING
    fields = {f.json_name for f in pb.StreamResponse.DESCRIPTOR.fields}
    assert fields == set(a2a.MEMBERS) - {"msg"}
    kinds = set()
    for model in (v03.Task, v03.Message, v03.TaskStatusUpdateEvent, v03.TaskArtifactUpdateEvent):
        kinds |= literals(model.model_fields["kind"].annotation)
    assert kinds == set(a2a.KINDS)


# -- Gemini Interactions (google-genai 3.6: the interactions SSE event and delta unions) --------


def test_every_interactions_event_delta_and_status_is_known() -> None:
    events = pytest.importorskip("google.genai._gaos.types.interactions.interactionsseevent")
    deltas = pytest.importorskip("google.genai._gaos.types.interactions.stepdeltadata")
    status = pytest.importorskip("google.genai._gaos.types.interactions.interactionstatusupdate")
    assert set(events._INTERACTION_SSE_EVENT_VARIANTS) == gemini_interactions.EVENTS
    handled = {"text", "thought_summary", "arguments_delta"}
    assert set(deltas._STEP_DELTA_DATA_VARIANTS) == gemini_interactions.QUIET_DELTAS | handled
    statuses = literals(status.InteractionStatusUpdateStatus)
    assert statuses == set(gemini_interactions.ENDS) | gemini_interactions.RUNNING


# -- AG-UI (ag-ui-protocol 1.0: EventType and the run outcomes) ---------------------------------


def test_every_ag_ui_event_type_and_outcome_is_known() -> None:
    core = pytest.importorskip("ag_ui.core")
    assert {e.value for e in core.EventType} == ag_ui.EVENT_TYPES
    outcomes = set()
    for model in (
        core.RunFinishedSuccessOutcome,
        core.RunFinishedInterruptOutcome,
        core.RunFinishedCancelledOutcome,
    ):
        outcomes |= literals(model.model_fields["type"].annotation)
    assert outcomes == set(ag_ui.OUTCOMES)
