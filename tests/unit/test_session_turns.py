"""The turn state rules of WebSocket sessions (core/sessions/), dialect by dialect."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from sseproxy.core import EndReason
from sseproxy.core.sessions import SessionDialect, TurnJudge, TurnResult, session_spec
from sseproxy.core.sessions.gemini_live import GeminiLiveJudge
from sseproxy.core.sessions.realtime import RealtimeJudge
from sseproxy.core.sessions.responses import ResponsesJudge


def up(judge: TurnJudge, *messages: dict[str, Any]) -> list[TurnResult]:
    ended = []
    for m in messages:
        raw = json.dumps(m).encode()
        ended += judge.upstream(json.loads(raw), raw).ended
    return ended


def created(rid: str = "resp_1") -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}


def done(status: str, rid: str = "resp_1", **details: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"id": rid, "status": status}
    if details:
        response["status_details"] = {"type": status, **details}
    response["usage"] = {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}
    return {"type": "response.done", "response": response}


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        ("/v1/realtime?model=gpt-realtime", SessionDialect.OPENAI_REALTIME),
        ("/v1/responses", SessionDialect.OPENAI_RESPONSES),
        (
            "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=k",
            SessionDialect.GEMINI_LIVE,
        ),
        (
            "/vertex/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent",
            SessionDialect.GEMINI_LIVE,
        ),
        ("/socket", SessionDialect.UNKNOWN),
    ],
)
def test_the_session_dialect_comes_from_the_path(path: str, dialect: SessionDialect) -> None:
    assert session_spec(path).dialect is dialect


# -- OpenAI Realtime -------------------------------------------------------------------------


def test_realtime_a_done_response_with_status_completed_is_a_completed_turn() -> None:
    judge = RealtimeJudge()
    delta = {"type": "response.output_text.delta", "response_id": "resp_1", "delta": "Hello"}
    beta = {"type": "response.text.delta", "response_id": "resp_1", "delta": "!"}
    [turn] = up(judge, created(), delta, beta, done("completed"))
    v = turn.verdict
    assert (turn.number, v.state, v.finish_reason, v.text_chars) == (1, "completed", "completed", 6)
    assert v.usage is not None and v.usage.output_tokens == 3
    assert v.response_id == "resp_1" and v.events == 4


@pytest.mark.parametrize(
    ("status", "details", "state", "reason", "category"),
    [
        (
            "incomplete",
            {"reason": "max_output_tokens"},
            "incomplete",
            "max_output_tokens",
            "length",
        ),
        (
            "incomplete",
            {"reason": "content_filter"},
            "incomplete",
            "content_filter",
            "content_filter",
        ),
        ("cancelled", {"reason": "turn_detected"}, "cancelled", "turn_detected", "other"),
        ("cancelled", {"reason": "client_cancelled"}, "cancelled", "client_cancelled", "other"),
    ],
)
def test_realtime_status_decides_the_turn(
    status: str, details: dict[str, Any], state: str, reason: str, category: str
) -> None:
    [turn] = up(RealtimeJudge(), created(), done(status, **details))
    v = turn.verdict
    assert (v.state, v.finish_reason, v.finish_category) == (state, reason, category)


def test_realtime_a_failed_response_carries_its_error() -> None:
    error = {"type": "server_error", "code": "rate_limit_exceeded", "message": "slow down"}
    [turn] = up(RealtimeJudge(), created(), done("failed", error=error))
    assert turn.verdict.state == "failed"
    assert turn.verdict.error is not None and turn.verdict.error.code == "rate_limit_exceeded"


def test_realtime_an_error_is_attached_to_the_open_turn_and_counted_on_the_session() -> None:
    judge = RealtimeJudge()
    error = {
        "type": "error",
        "error": {"type": "invalid_request_error", "code": "bad", "message": "m"},
    }
    [turn] = up(judge, created(), error, done("completed"))
    assert turn.verdict.state == "completed"  # recoverable: response.done decides
    assert turn.verdict.error is not None and turn.verdict.error.code == "bad"
    assert judge.errors == 1


def test_realtime_an_error_answering_a_response_create_is_a_failed_turn() -> None:
    judge = RealtimeJudge()
    judge.client({"type": "response.create"})
    quota = {"type": "error", "error": {"type": "insufficient_quota", "code": "insufficient_quota"}}
    [turn] = up(judge, quota)
    assert turn.verdict.state == "failed" and turn.verdict.error.code == "insufficient_quota"
    assert up(judge, quota) == []  # nothing asked for: the session counts it
    assert judge.anomalies["error_without_response"] == 1


@pytest.mark.parametrize(
    ("code", "anomaly"),
    [
        ("session_expired", "session_expired"),
        ("conversation_already_has_active_response", "active_response_conflict"),
    ],
)
def test_realtime_named_errors_are_session_anomalies(code: str, anomaly: str) -> None:
    judge = RealtimeJudge()
    up(judge, {"type": "error", "error": {"type": "invalid_request_error", "code": code}})
    assert judge.anomalies[anomaly] == 1


def test_realtime_audio_is_counted_in_bytes_and_milliseconds_never_kept() -> None:
    judge = RealtimeJudge()
    pcm = base64.b64encode(b"\x00" * 4800).decode()  # 100 ms of PCM16 at 24 kHz
    ga = {"type": "response.output_audio.delta", "response_id": "resp_1", "delta": pcm}
    beta = {"type": "response.audio.delta", "response_id": "resp_1", "delta": pcm}
    [turn] = up(judge, created(), ga, beta, done("completed"))
    assert (turn.audio_bytes, turn.audio_ms) == (9600, 200.0)


def test_realtime_g711_audio_is_8_bytes_per_millisecond() -> None:
    judge = RealtimeJudge()
    session = {"audio": {"output": {"format": {"type": "audio/pcmu"}}}}
    g711 = base64.b64encode(b"\x00" * 800).decode()
    delta = {"type": "response.output_audio.delta", "response_id": "resp_1", "delta": g711}
    [turn] = up(
        judge, {"type": "session.updated", "session": session}, created(), delta, done("completed")
    )
    assert turn.audio_ms == 100.0


def test_realtime_function_call_arguments_make_a_tool_call() -> None:
    args = {
        "type": "response.function_call_arguments.delta",
        "response_id": "resp_1",
        "call_id": "c1",
        "delta": '{"a":',
    }
    more = {
        "type": "response.function_call_arguments.delta",
        "response_id": "resp_1",
        "call_id": "c1",
        "delta": "1}",
    }
    fin = {
        "type": "response.function_call_arguments.done",
        "response_id": "resp_1",
        "call_id": "c1",
        "name": "f",
        "arguments": '{"a":1}',
    }
    [turn] = up(RealtimeJudge(), created(), args, more, fin, done("completed"))
    [call] = turn.verdict.tool_calls
    assert (call.id, call.name, call.arguments_valid_json) == ("c1", "f", True)
    assert turn.verdict.finish_category == "tool_use"


def test_turns_are_keyed_by_response_id_and_numbered_as_they_open() -> None:
    judge = RealtimeJudge()
    a = {"type": "response.output_text.delta", "response_id": "A", "delta": "aa"}
    b = {"type": "response.output_text.delta", "response_id": "B", "delta": "b"}
    ended = up(
        judge, created("A"), created("B"), a, b, done("completed", "B"), done("completed", "A")
    )
    assert [(t.number, t.verdict.response_id, t.verdict.text_chars) for t in ended] == [
        (2, "B", 1),
        (1, "A", 2),
    ]


@pytest.mark.parametrize(
    ("end", "state"),
    [
        (EndReason.UPSTREAM_CLOSED, "interrupted"),
        (EndReason.UPSTREAM_RESET, "interrupted"),
        (EndReason.CLIENT_DISCONNECTED, "cancelled"),
    ],
)
def test_a_turn_open_at_the_close_is_interrupted_or_cancelled(end: EndReason, state: str) -> None:
    judge = RealtimeJudge()
    up(judge, created())
    [turn] = judge.close(
        end, 1011 if end == EndReason.UPSTREAM_CLOSED else None, "Deadline expired"
    )
    assert turn.verdict.state == state
    assert turn.verdict.interruption is not None and turn.verdict.interruption.reason == end
    assert judge.anomalies["turn_open_at_close"] == 1
    if end == EndReason.UPSTREAM_CLOSED:
        assert turn.verdict.error is not None
        assert (turn.verdict.error.code, turn.verdict.error.message) == ("1011", "Deadline expired")


# -- the Responses API over a WebSocket --------------------------------------------------------


def responses_turn(*events: dict[str, Any]) -> tuple[ResponsesJudge, list[TurnResult]]:
    judge = ResponsesJudge()
    judge.client({"type": "response.create", "model": "gpt-5"})
    return judge, up(judge, *events)


def test_responses_a_completed_response_is_a_completed_turn() -> None:
    r = {"id": "resp_9", "status": "completed", "output": []}
    _, [turn] = responses_turn(
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {"id": "resp_9", "status": "in_progress"},
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "i",
            "output_index": 0,
            "content_index": 0,
            "delta": "hi",
        },
        {"type": "response.completed", "sequence_number": 2, "response": r},
    )
    assert turn.verdict.state == "completed" and turn.verdict.text_chars == 2


def test_responses_an_incomplete_response_is_an_incomplete_turn() -> None:
    r = {
        "id": "resp_9",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    _, [turn] = responses_turn({"type": "response.incomplete", "sequence_number": 0, "response": r})
    assert (turn.verdict.state, turn.verdict.finish_reason) == ("incomplete", "max_output_tokens")


@pytest.mark.parametrize(
    ("code", "anomaly"),
    [
        ("websocket_connection_limit_reached", "connection_limit_reached"),
        ("previous_response_not_found", "previous_response_not_found"),
    ],
)
def test_responses_an_error_with_a_status_is_an_http_error_turn(code: str, anomaly: str) -> None:
    error = {
        "type": "error",
        "status": 400,
        "error": {"type": "invalid_request_error", "code": code},
    }
    judge, [turn] = responses_turn(error)
    assert (turn.verdict.state, turn.status) == ("http_error", 400)
    assert turn.verdict.error is not None and turn.verdict.error.code == code
    assert judge.anomalies[anomaly] == 1


def test_responses_an_error_without_a_status_is_a_failed_turn() -> None:
    error = {"type": "error", "error": {"type": "server_error", "code": "server_error"}}
    _, [turn] = responses_turn(error)
    assert turn.verdict.state == "failed"


def test_responses_a_second_create_while_one_is_open_is_a_conflict() -> None:
    judge = ResponsesJudge()
    judge.client({"type": "response.create"})
    judge.client({"type": "response.create"})
    assert judge.anomalies["active_response_conflict"] == 1 and judge.turns == 1


# -- Gemini Live -------------------------------------------------------------------------------


def content(**fields: Any) -> dict[str, Any]:
    return {"serverContent": fields}


def text(t: str) -> dict[str, Any]:
    return content(modelTurn={"parts": [{"text": t}]})


def test_gemini_generation_complete_then_turn_complete_is_completed() -> None:
    usage = {"promptTokenCount": 4, "responseTokenCount": 2, "totalTokenCount": 6}
    judge = GeminiLiveJudge()
    ended = up(
        judge, {"setupComplete": {}}, text("Hi "), text("there"), content(generationComplete=True)
    )
    assert ended == []
    [turn] = up(judge, {**content(turnComplete=True), "usageMetadata": usage})
    v = turn.verdict
    assert (v.state, v.text_chars, v.usage.output_tokens) == ("completed", 8, 2)


def test_gemini_interrupted_then_turn_complete_is_cancelled() -> None:
    judge = GeminiLiveJudge()
    [turn] = up(judge, text("Hi"), content(interrupted=True), content(turnComplete=True))
    assert (turn.verdict.state, turn.verdict.finish_reason) == ("cancelled", "interrupted")
    [nxt] = up(judge, text("again"), content(turnComplete=True))  # the flag was the turn's
    assert nxt.verdict.state == "completed" and nxt.number == 2


@pytest.mark.parametrize(
    "reason", ["MALFORMED_FUNCTION_CALL", "RESPONSE_REJECTED", "PROHIBITED_CONTENT"]
)
def test_gemini_a_turn_complete_reason_is_incomplete(reason: str) -> None:
    [turn] = up(GeminiLiveJudge(), text("x"), content(turnComplete=True, turnCompleteReason=reason))
    assert (turn.verdict.state, turn.verdict.finish_reason) == ("incomplete", reason)


def test_gemini_a_tool_call_ends_the_models_turn() -> None:
    call = {"toolCall": {"functionCalls": [{"id": "f1", "name": "lookup", "args": {"q": 1}}]}}
    [turn] = up(GeminiLiveJudge(), call)
    [summary] = turn.verdict.tool_calls
    assert (turn.verdict.state, turn.verdict.finish_category) == ("completed", "tool_use")
    assert (summary.name, summary.arguments_valid_json) == ("lookup", True)


def test_gemini_go_away_and_resumption_are_on_the_session() -> None:
    judge = GeminiLiveJudge()
    up(
        judge,
        {"goAway": {"timeLeft": "10s"}},
        {"sessionResumptionUpdate": {"newHandle": "h", "resumable": True}},
    )
    assert (judge.anomalies["go_away"], judge.go_away_s, judge.resumable) == (1, 10.0, True)


def test_gemini_audio_uses_the_rate_its_mime_type_says() -> None:
    pcm = base64.b64encode(b"\x00" * 3200).decode()  # 100 ms at 16 kHz
    part = {"inlineData": {"mimeType": "audio/pcm;rate=16000", "data": pcm}}
    [turn] = up(GeminiLiveJudge(), content(modelTurn={"parts": [part]}), content(turnComplete=True))
    assert (turn.audio_bytes, turn.audio_ms) == (3200, 100.0)


def test_gemini_a_close_1011_mid_turn_is_interrupted_with_its_reason() -> None:
    judge = GeminiLiveJudge()
    up(judge, text("partial"))
    [turn] = judge.close(EndReason.UPSTREAM_CLOSED, 1011, "Deadline expired")
    assert turn.verdict.state == "interrupted"
    assert (turn.verdict.error.code, turn.verdict.error.message) == ("1011", "Deadline expired")


def test_more_open_turns_than_the_bound_are_counted_not_kept() -> None:
    judge = RealtimeJudge()
    up(judge, *(created(f"r{n}") for n in range(17)))
    assert (len(judge.open), judge.anomalies["too_many_open_turns"]) == (16, 1)


def test_five_sessions_in_ten_seconds_with_the_same_key_are_a_reconnect_loop() -> None:
    from sseproxy.core.sessions.reconnect import ReconnectWatch

    watch = ReconnectWatch()
    assert [watch.opened("openai", ("k1",), t * 0.3) for t in range(5)] == [False] * 4 + [True]
    assert watch.opened("openai", ("k2",), 1.5) is False  # another key
    assert watch.opened("openai", ("k1",), 100.0) is False  # the window has passed
