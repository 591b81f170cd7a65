"""The HTTP framing is evidence: a body that did not end by its own framing is never a success
unless the dialect's end marker had already arrived; a client that left after the outcome was
known keeps the outcome; formats without a terminal signal are never `completed`."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions, with_transport
from sseproxy.core.eventstream import event
from sseproxy.core.request import RequestFacts, request_facts
from sseproxy.tools.replay import ReplayOptions, replay
from tests.streams import chat_chunk, cut, ndjson, sse, verdict_of


def gemini(text: str) -> dict[str, Any]:
    """A Gemini chunk as some models send them: `finishReason: STOP` on every chunk."""
    parts = [{"text": text}]
    return {"candidates": [{"index": 0, "content": {"parts": parts}, "finishReason": "STOP"}]}


def anthropic(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


def responses(kind: str, seq: int, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, "sequence_number": seq, **fields}


@dataclass(frozen=True)
class Case:
    """`decided`: the bytes up to the point where the outcome is known but the end marker has
    not arrived; `marker`: the end marker (empty for Gemini, which has none)."""

    dialect: Dialect
    decided: bytes
    marker: bytes
    outcome: str  # the state of the whole, cleanly ended body
    finish: str | None = None  # its finish_reason

    @property
    def whole(self) -> bytes:
        return self.decided + self.marker


CHAT = Case(
    Dialect.OPENAI_CHAT,
    sse(chat_chunk("Hello"), chat_chunk(" world"), chat_chunk(finish="stop")),
    sse("[DONE]"),
    "completed",
    "stop",
)
RESPONSES = Case(
    Dialect.OPENAI_RESPONSES,
    sse(
        responses("response.created", 0, response={"id": "r", "status": "in_progress"}),
        responses("response.output_text.delta", 1, item_id="m", content_index=0, delta="Hi"),
    ),
    sse(responses("response.completed", 2, response={"id": "r", "status": "completed"})),
    "completed",
    "completed",
)
ANTHROPIC = Case(
    Dialect.ANTHROPIC_MESSAGES,
    sse(
        anthropic("message_start", message={"id": "m", "model": "c", "usage": {}}),
        anthropic("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
        anthropic("content_block_stop", index=0),
        anthropic("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1}),
    ),
    sse(anthropic("message_stop")),
    "completed",
    "end_turn",
)
GEMINI = Case(Dialect.GEMINI, sse(gemini("Hel"), gemini("lo")), b"", "completed", "STOP")
VERCEL = Case(
    Dialect.VERCEL_UI,
    sse(
        {"type": "start"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Hi"},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop"},
    ),
    sse("[DONE]"),
    "completed",
    "stop",
)
OLLAMA = Case(
    Dialect.OLLAMA,
    ndjson({"model": "l", "message": {"role": "assistant", "content": "Hi"}, "done": False}),
    ndjson({"model": "l", "message": {"content": ""}, "done": True, "done_reason": "stop"}),
    "completed",
    "stop",
)
PLAIN = Case(Dialect.SSE, sse("a", "b"), b"", "unconfirmed")


def aws(kind: str, **payload: Any) -> bytes:
    return event(kind, json.dumps(payload).encode())


def invoke_chunk(kind: str, **fields: Any) -> bytes:
    inner = json.dumps({"type": kind, **fields}).encode()
    return aws("chunk", bytes=base64.b64encode(inner).decode())


BEDROCK_CONVERSE = Case(
    Dialect.BEDROCK_CONVERSE,
    aws("messageStart", role="assistant")
    + aws("contentBlockDelta", contentBlockIndex=0, delta={"text": "Hi"})
    + aws("contentBlockStop", contentBlockIndex=0),
    aws("messageStop", stopReason="end_turn") + aws("metadata", usage={"outputTokens": 1}),
    "completed",
    "end_turn",
)
BEDROCK_INVOKE = Case(
    Dialect.BEDROCK_INVOKE,
    invoke_chunk("message_start", message={"id": "m", "usage": {}})
    + invoke_chunk("content_block_start", index=0, content_block={"type": "text", "text": ""})
    + invoke_chunk("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"})
    + invoke_chunk("content_block_stop", index=0)
    + invoke_chunk("message_delta", delta={"stop_reason": "end_turn"}),
    invoke_chunk("message_stop"),
    "completed",
    "end_turn",
)
COHERE = Case(
    Dialect.COHERE_CHAT,
    sse(
        ("message-start", {"type": "message-start", "id": "c"}),
        (
            "content-delta",
            {
                "type": "content-delta",
                "index": 0,
                "delta": {"message": {"content": {"text": "Hi"}}},
            },
        ),
        ("content-end", {"type": "content-end", "index": 0}),
    ),
    sse(("message-end", {"type": "message-end", "delta": {"finish_reason": "COMPLETE"}})),
    "completed",
    "COMPLETE",
)
MCP = Case(
    Dialect.MCP,
    b"id: s-0\ndata:\n\n"
    + sse({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}),
    sse({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "Hi"}]}}),
    "completed",
)
# Issue 31's dialects, in the shapes their SDKs write (see test_a2a.py, test_ag_ui.py and
# test_gemini_interactions.py for the sources).
A2A_TASK = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}


def a2a(result: dict[str, Any]) -> dict[str, Any]:
    return {"result": result, "id": 1, "jsonrpc": "2.0"}


def a2a_status(state: str) -> dict[str, Any]:
    update = {"taskId": "t1", "contextId": "c1", "status": {"state": state}}
    return a2a({"statusUpdate": update})


A2A = Case(
    Dialect.A2A,
    sse(
        a2a({"task": A2A_TASK}),
        a2a_status("TASK_STATE_WORKING"),
        a2a({"artifactUpdate": {"taskId": "t1", "artifact": {"parts": [{"text": "Hi"}]}}}),
    ),
    sse(a2a_status("TASK_STATE_COMPLETED")),
    "completed",
    "completed",
)
GEMINI_INTERACTIONS = Case(
    Dialect.GEMINI_INTERACTIONS,
    sse(
        ("interaction.created", {"event_type": "interaction.created", "interaction": {"id": "i"}}),
        (
            "step.delta",
            {"event_type": "step.delta", "index": 0, "delta": {"type": "text", "text": "Hi"}},
        ),
    ),
    sse(
        (
            "interaction.completed",
            {
                "event_type": "interaction.completed",
                "interaction": {"id": "i", "status": "completed"},
            },
        )
    ),
    "completed",
    "completed",
)
AG_UI = Case(
    Dialect.AG_UI,
    sse(
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "Hi"},
    ),
    sse({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
    "completed",
    "success",
)
CASES = [CHAT, RESPONSES, ANTHROPIC, GEMINI, VERCEL, OLLAMA, PLAIN]
CASES += [BEDROCK_CONVERSE, BEDROCK_INVOKE, COHERE, MCP, A2A, GEMINI_INTERACTIONS, AG_UI]
WITH_MARKER = [c for c in CASES if c.marker]


def ids(case: Case) -> str:
    return str(case.dialect)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_whole_body_gets_the_dialects_outcome(case: Case) -> None:
    v = verdict_of(case.whole, case.dialect)
    assert (v.state, v.http_complete, v.interruption) == (case.outcome, True, None)


@pytest.mark.parametrize("end", [EndReason.UPSTREAM_CLOSED, EndReason.UPSTREAM_RESET])
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_truncated_body_before_the_end_marker_is_interrupted(case: Case, end: EndReason) -> None:
    """The Chat stream cut after its finish_reason chunk that curl and openai-node reported
    as broken; Gemini's STOP on every chunk; a generic SSE stream cut between events."""
    v = verdict_of(case.decided, case.dialect, end, http_complete=False)
    assert v.state == "interrupted"
    assert v.interruption is not None and v.interruption.reason == end
    assert v.http_complete is False
    assert "missing_done" not in v.anomalies  # that rule is for bodies that ended cleanly


@pytest.mark.parametrize("end", [EndReason.IDLE_TIMEOUT, EndReason.PROXY_SHUTDOWN])
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_the_proxys_own_cut_is_interrupted(case: Case, end: EndReason) -> None:
    v = verdict_of(case.decided, case.dialect, end, http_complete=False)
    assert (v.state, v.interruption.reason if v.interruption else None) == ("interrupted", end)


@pytest.mark.parametrize(
    "end", [EndReason.UPSTREAM_RESET, EndReason.UPSTREAM_CLOSED, EndReason.IDLE_TIMEOUT]
)
@pytest.mark.parametrize("case", WITH_MARKER, ids=ids)
def test_truncated_after_the_end_marker_is_interrupted_and_keeps_the_outcome(
    case: Case, end: EndReason
) -> None:
    """Nearly every client raises on the cut after the marker (anthropic, openai Responses,
    cohere, ollama, boto3, node): never `completed`. The outcome that had arrived is kept."""
    v = verdict_of(case.whole, case.dialect, end, http_complete=False)
    assert (v.state, v.anomalies.get("truncated_after_terminal")) == ("interrupted", 1)
    assert (v.finish_reason, v.finish_category) == (case.finish, "stop")
    assert v.interruption is not None and v.interruption.reason == end


def test_gemini_has_no_end_marker_so_a_truncated_body_is_always_interrupted() -> None:
    data = sse(gemini("one "), gemini("two "), gemini("three "), gemini("four"))
    assert verdict_of(data, Dialect.GEMINI).state == "completed"
    cut = verdict_of(data, Dialect.GEMINI, EndReason.UPSTREAM_CLOSED, http_complete=False)
    assert (cut.state, cut.text_chars) == ("interrupted", 18)


def test_chat_without_done_is_completed_only_when_the_body_ended_cleanly() -> None:
    clean = verdict_of(CHAT.decided, Dialect.OPENAI_CHAT, EndReason.UPSTREAM_CLOSED)
    assert (clean.state, clean.anomalies.get("missing_done")) == ("completed", 1)
    cut = verdict_of(
        CHAT.decided, Dialect.OPENAI_CHAT, EndReason.UPSTREAM_CLOSED, http_complete=False
    )
    assert cut.state == "interrupted"


@pytest.mark.parametrize("case", [CHAT, ANTHROPIC, GEMINI, VERCEL, BEDROCK_INVOKE], ids=ids)
def test_client_leaving_after_the_outcome_is_known_keeps_it(case: Case) -> None:
    """LiteLLM's SDK closes right after Anthropic's `message_delta`: not a cancellation.
    (Responses and Ollama announce the outcome in their end marker itself.)"""
    v = verdict_of(case.decided, case.dialect, EndReason.CLIENT_DISCONNECTED, http_complete=False)
    v = with_transport(v, 200, EndReason.CLIENT_DISCONNECTED)
    assert (v.state, v.anomalies.get("client_left_before_end")) == (case.outcome, 1)
    assert v.interruption is not None and v.interruption.reason == "client_disconnected"


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_client_leaving_before_the_outcome_is_cancelled(case: Case) -> None:
    if case.decided[:1] == b"\x00":  # an AWS event stream: the first message, by its length
        first_event = case.decided[: int.from_bytes(case.decided[:4], "big")]
    else:
        first_event = case.decided[: case.decided.index(b"\n") + 1]
        if not first_event.endswith(b"}\n"):  # SSE: keep the whole first event
            first_event = case.decided[: case.decided.index(b"\n\n") + 2]
    v = verdict_of(first_event, case.dialect, EndReason.CLIENT_DISCONNECTED, http_complete=False)
    v = with_transport(v, 200, EndReason.CLIENT_DISCONNECTED)
    assert v.state == "cancelled"
    assert "client_left_before_end" not in v.anomalies


@pytest.mark.parametrize("case", WITH_MARKER, ids=ids)
def test_client_leaving_after_the_end_marker_changes_nothing(case: Case) -> None:
    v = verdict_of(case.whole, case.dialect, EndReason.CLIENT_DISCONNECTED, http_complete=False)
    assert (v.state, v.interruption) == (case.outcome, None)
    assert not {"client_left_before_end", "truncated_after_terminal"} & set(v.anomalies)


# -- formats without a terminal signal --------------------------------------------------------


def test_text_plain_is_counted_as_text_and_never_completed() -> None:
    """The Vercel AI SDK's `toTextStreamResponse`: plain text, no events, no terminal."""
    text = "Hello, 世界! No events here.\nA second line without an end"
    v = verdict_of(text.encode(), content_type="text/plain; charset=utf-8")
    assert (v.dialect, v.state, v.text_chars) == ("text", "unconfirmed", len(text))
    assert v.anomalies == {"no_terminal_signal": 1}
    cut = verdict_of(
        text.encode(),
        None,
        EndReason.UPSTREAM_CLOSED,
        http_complete=False,
        content_type="text/plain",
    )
    assert cut.state == "interrupted"


@pytest.mark.parametrize("ctype", ["application/octet-stream", "text/html", "text/plain"])
def test_other_non_json_bodies_are_unconfirmed(ctype: str) -> None:
    v = verdict_of(b"\x00\x01binary-ish \xff payload", content_type=ctype)
    assert (v.state, v.anomalies.get("no_terminal_signal")) == ("unconfirmed", 1)


def test_sse_served_as_text_plain_is_analysed_as_sse() -> None:
    v = verdict_of(CHAT.whole, content_type="text/plain")
    assert (v.dialect, v.state, v.anomalies.get("content_type_mismatch")) == (
        "openai-chat",
        "completed",
        1,
    )


@pytest.mark.parametrize("dialect", [None, *(c.dialect for c in CASES)])
def test_an_empty_2xx_body_is_never_completed(dialect: Dialect | None) -> None:
    v = verdict_of(b"", dialect, EndReason.UPSTREAM_CLOSED)
    assert (v.state, v.anomalies.get("empty_body")) == ("unconfirmed", 1)


def test_replay_of_an_empty_file_exits_1() -> None:
    out = io.StringIO()
    assert replay(b"", ReplayOptions(), out) == 1
    assert '"state":"unconfirmed"' in out.getvalue()


# -- error bodies and Responses finish reasons ------------------------------------------------

LITELLM_ERROR = sse(
    {"error": {"message": "litellm.APIError: boom", "type": "None", "param": None, "code": "500"}},
    "[DONE]",
)


@pytest.mark.parametrize(
    "dialect",
    [
        Dialect.OPENAI_CHAT,
        Dialect.OPENAI_RESPONSES,
        Dialect.ANTHROPIC_MESSAGES,
        Dialect.GEMINI,
        Dialect.VERCEL_UI,
        Dialect.SSE,
    ],
)
def test_an_error_body_in_sse_form_fills_error_in_every_dialect(dialect: Dialect) -> None:
    """LiteLLM answers HTTP 500 `text/event-stream` with an error object, then `[DONE]`."""
    v = verdict_of(LITELLM_ERROR, dialect)
    assert v.error is not None
    assert (v.error.message, v.error.code) == ("litellm.APIError: boom", "500")
    assert with_transport(v, 500, EndReason.UPSTREAM_CLOSED).state == "http_error"


def test_responses_error_event_has_no_in_progress_finish_reason() -> None:
    data = RESPONSES.decided + sse(
        responses("error", 2, error={"type": "server_error", "message": "x"}, code=None)
    )
    v = verdict_of(data, Dialect.OPENAI_RESPONSES)
    assert (v.state, v.finish_reason) == ("failed", None)


def test_responses_failed_reports_failed() -> None:
    failed = {"id": "r", "status": "failed", "error": {"code": "server_error", "message": "x"}}
    data = RESPONSES.decided + sse(responses("response.failed", 2, response=failed))
    assert verdict_of(data, Dialect.OPENAI_RESPONSES).finish_reason == "failed"


# -- request-aware checks ---------------------------------------------------------------------


def facts(body: str, path: str = "/v1/chat/completions", query: str = "") -> RequestFacts:
    return request_facts(path, query, body.encode())


def test_request_facts_are_read_from_body_and_path() -> None:
    f = facts('{"model":"gpt","stream":true,"n":2,"stream_options":{"include_usage":true}}')
    assert (f.model, f.stream, f.stream_framing, f.choices, f.include_usage) == (
        "gpt",
        True,
        True,
        2,
        True,
    )
    gem = facts("{}", "/v1beta/models/gemini-2.0:streamGenerateContent", "alt=sse")
    assert (gem.model, gem.stream, gem.stream_framing) == ("gemini-2.0", True, True)
    array = facts("{}", "/v1beta/models/g:streamGenerateContent")
    assert (array.stream, array.stream_framing) == (True, False)  # a JSON array is its stream
    assert facts("{}", "/api/chat").stream is True  # Ollama streams by default
    assert facts('{"n": 100000}').choices is None  # beyond any real request: not trusted


def test_stream_not_honoured_when_a_json_body_answers_a_stream_request() -> None:
    """LiteLLM on /v1/messages with a mock model: the anthropic SDK then yields nothing."""
    body = (
        b'{"id":"m","type":"message","role":"assistant","model":"c","content":'
        b'[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"output_tokens":1}}'
    )
    asked = facts('{"stream":true}', "/v1/messages")
    v = verdict_of(body, Dialect.ANTHROPIC_MESSAGES, request=asked)
    assert v.anomalies.get("stream_not_honoured") == 1
    plain = verdict_of(body, Dialect.ANTHROPIC_MESSAGES, request=facts("{}", "/v1/messages"))
    assert "stream_not_honoured" not in plain.anomalies
    gemini_array = b'[{"candidates":[{"index":0,"finishReason":"STOP"}]}]'
    array = facts("{}", "/v1beta/models/g:streamGenerateContent")
    assert "stream_not_honoured" not in verdict_of(gemini_array, None, request=array).anomalies


def test_usage_missing_when_asked_for_and_not_sent() -> None:
    asked = facts('{"stream":true,"stream_options":{"include_usage":true}}')
    v = verdict_of(CHAT.whole, Dialect.OPENAI_CHAT, request=asked)
    assert (v.state, v.anomalies.get("usage_missing")) == ("completed", 1)
    usage = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
    with_usage = CHAT.decided + sse(usage, "[DONE]")
    assert (
        "usage_missing" not in verdict_of(with_usage, Dialect.OPENAI_CHAT, request=asked).anomalies
    )


def test_choices_missing_when_fewer_finished_than_n() -> None:
    asked = facts('{"stream":true,"n":2}')
    v = verdict_of(CHAT.whole, Dialect.OPENAI_CHAT, request=asked)
    assert (v.state, v.anomalies.get("choices_missing")) == ("completed", 1)
    assert "choices_missing" not in verdict_of(CHAT.whole, Dialect.OPENAI_CHAT).anomalies


# -- chunking never matters -------------------------------------------------------------------

ENDS: list[tuple[EndReason, bool | None]] = [
    (EndReason.END_OF_INPUT, True),
    (EndReason.UPSTREAM_CLOSED, False),
    (EndReason.UPSTREAM_RESET, False),
    (EndReason.CLIENT_DISCONNECTED, False),
    (EndReason.CLIENT_DISCONNECTED, None),
    (EndReason.CLIENT_DISCONNECTED, True),
    (EndReason.IDLE_TIMEOUT, False),
]


@given(
    st.sampled_from(CASES),
    st.booleans(),
    st.sampled_from(ENDS),
    st.lists(st.integers(min_value=0), max_size=12),
)
def test_same_bytes_and_same_end_give_the_same_verdict_however_chunked(
    case: Case, whole: bool, ending: tuple[EndReason, bool | None], points: list[int]
) -> None:
    data = case.whole if whole else case.decided
    end, http_complete = ending

    def run(chunks: list[bytes]) -> Any:
        tap = StreamTap(case.dialect, options=TapOptions(strict=True))
        for chunk in chunks:
            tap.feed(chunk)
        return tap.close(end, http_complete=http_complete)

    assert run(cut(data, points)) == run([data])
