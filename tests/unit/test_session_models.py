"""What a session turn says beyond its state: the model asked for and the one that answered
(where each dialect's protocol names them), and text messages that are not UTF-8."""

from __future__ import annotations

import json
from typing import Any

from sseproxy.core import EndReason
from sseproxy.core.sessions import TurnJudge, TurnResult, parse_message
from sseproxy.core.sessions.gemini_live import GeminiLiveJudge
from sseproxy.core.sessions.realtime import RealtimeJudge
from sseproxy.core.sessions.responses import ResponsesJudge


def up(judge: TurnJudge, *messages: dict[str, Any]) -> list[TurnResult]:
    ended = []
    for m in messages:
        raw = json.dumps(m).encode()
        ended += judge.upstream(json.loads(raw), raw).ended
    return ended


def realtime_done(rid: str, **response: Any) -> dict[str, Any]:
    return {"type": "response.done", "response": {"id": rid, "status": "completed", **response}}


def test_a_realtime_turn_asks_for_the_handshakes_model_and_names_the_responses() -> None:
    judge = RealtimeJudge(path="/v1/realtime?model=gpt-realtime&key=k")
    [turn] = up(
        judge,
        {"type": "session.created", "session": {"model": "gpt-realtime-2025-08-28"}},
        {"type": "response.created", "response": {"id": "r1", "model": "gpt-realtime-x"}},
        realtime_done("r1", model="gpt-realtime-x"),
    )
    assert (turn.model, turn.verdict.model) == ("gpt-realtime", "gpt-realtime-x")


def test_a_realtime_response_without_a_model_answers_with_the_sessions() -> None:
    judge = RealtimeJudge(path="/v1/realtime")
    [first, second] = up(
        judge,
        {"type": "session.created", "session": {"model": "gpt-realtime-a"}},
        {"type": "response.created", "response": {"id": "r1"}},
        realtime_done("r1"),
        {"type": "session.updated", "session": {"model": "gpt-realtime-b"}},
        {"type": "response.created", "response": {"id": "r2"}},
        realtime_done("r2"),
    )
    assert (first.model, first.verdict.model) == (None, "gpt-realtime-a")
    assert second.verdict.model == "gpt-realtime-b"


def test_each_responses_turn_asks_for_its_response_creates_model() -> None:
    judge = ResponsesJudge()
    models = []
    for asked, answered in (("gpt-5", "gpt-5-2025-08-07"), ("gpt-5-mini", "gpt-5-mini-1")):
        judge.client({"type": "response.create", "model": asked, "input": []})
        [turn] = up(
            judge,
            {"type": "response.created", "response": {"id": "r", "model": answered}},
            {
                "type": "response.completed",
                "response": {"id": "r", "model": answered, "status": "completed"},
            },
        )
        models.append((turn.model, turn.verdict.model))
    assert models == [("gpt-5", "gpt-5-2025-08-07"), ("gpt-5-mini", "gpt-5-mini-1")]


def test_a_gemini_live_turn_asks_for_the_setups_model_named_as_over_http() -> None:
    judge = GeminiLiveJudge()
    judge.client({"setup": {"model": "models/gemini-live-2.5-flash"}})
    [turn] = up(
        judge,
        {"setupComplete": {}},
        {"serverContent": {"modelTurn": {"parts": [{"text": "hi"}]}}},
        {"serverContent": {"turnComplete": True}},
    )
    assert turn.model == "gemini-live-2.5-flash"


def test_a_model_name_is_bounded() -> None:
    judge = ResponsesJudge()
    judge.client({"type": "response.create", "model": "m" * 10_000})
    [turn] = judge.close(EndReason.UPSTREAM_RESET)
    assert turn.model == "m" * 200


def test_text_that_is_not_utf8_is_counted_on_the_session_and_its_turn() -> None:
    judge = RealtimeJudge()
    up(judge, {"type": "response.created", "response": {"id": "r1"}})
    bad = b'{"type":"response.output_text.delta","response_id":"r1","delta":"\xff"}'
    assert parse_message(bad) is None  # judged as not JSON, never an error
    judge.upstream(parse_message(bad), bad)
    judge.text(bad)
    judge.text("héllo".encode())  # valid: not counted
    [turn] = up(judge, realtime_done("r1"))
    assert judge.anomalies["invalid_utf8"] == 1
    assert turn.verdict.anomalies == {"invalid_utf8": 1}
    assert turn.verdict.state == "completed"


def test_text_that_is_not_utf8_outside_a_turn_is_the_sessions_only() -> None:
    judge = GeminiLiveJudge()
    judge.text(b"\xc3\x28")
    assert judge.anomalies == {"invalid_utf8": 1}
