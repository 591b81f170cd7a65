"""Responses over a WebSocket, steering and lanes (core/sessions/responses.py), from wire-shaped
message sequences. Shapes: openai-python 3.57's `types/beta` (`BetaResponseSteerEvent`,
`BetaResponseSteerAcceptedEvent` / `PendingEvent` / `FailedEvent`, `BetaResponseIncompleteEvent`
with `incomplete_details.reason: "steered"`, `ResponseCreate.stream_id`, the `Ws*` server events
that echo `stream_id`). Their sequence numbers: each response counts its own from 0, as over
SSE; the SDK does not say whether a steering answer shares them, so both are fed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sseproxy.core.sessions import TurnResult
from sseproxy.core.sessions.base import MAX_OPEN_TURNS, HandOver
from sseproxy.core.sessions.responses import MAX_LANE_CHARS, MAX_LANES, ResponsesJudge


def feed(judge: ResponsesJudge, *messages: tuple[str, dict[str, Any]]) -> list[TurnResult]:
    """("c", message) the client sent, ("u", message) the upstream sent, in order."""
    ended: list[TurnResult] = []
    for side, message in messages:
        raw = json.dumps(message).encode()
        if side == "c":
            ended += judge.client(json.loads(raw)).ended
        else:
            ended += judge.upstream(json.loads(raw), raw).ended
    return ended


def lane(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    return event if stream_id is None else {**event, "stream_id": stream_id}


def create(stream_id: str | None = None, **fields: Any) -> tuple[str, dict[str, Any]]:
    body = {"type": "response.create", "model": "gpt-5.5", "input": "Write a poem", **fields}
    return "c", lane(body, stream_id)


def created(rid: str, seq: int = 0, stream_id: str | None = None) -> tuple[str, dict[str, Any]]:
    response = {"id": rid, "object": "response", "status": "in_progress", "model": "gpt-5.5"}
    event = {"type": "response.created", "sequence_number": seq, "response": response}
    return "u", lane(event, stream_id)


def delta(text: str, seq: int, stream_id: str | None = None) -> tuple[str, dict[str, Any]]:
    event = {
        "type": "response.output_text.delta",
        "sequence_number": seq,
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
    }
    return "u", lane(event, stream_id)


def completed(rid: str, seq: int, stream_id: str | None = None) -> tuple[str, dict[str, Any]]:
    response = {"id": rid, "object": "response", "status": "completed", "output": []}
    event = {"type": "response.completed", "sequence_number": seq, "response": response}
    return "u", lane(event, stream_id)


def steered(rid: str, seq: int, stream_id: str | None = None) -> tuple[str, dict[str, Any]]:
    response = {
        "id": rid,
        "object": "response",
        "status": "incomplete",
        "incomplete_details": {"reason": "steered"},
        "output": [],
    }
    event = {"type": "response.incomplete", "sequence_number": seq, "response": response}
    return "u", lane(event, stream_id)


def steer(rid: str) -> tuple[str, dict[str, Any]]:
    # "This event accepts only type, previous_response_id, and input. Do not send stream_id"
    return "c", {"type": "response.steer", "previous_response_id": rid, "input": "In French."}


def answer(kind: str, rid: str, seq: int, stream_id: str | None = None) -> tuple[str, dict]:
    event: dict[str, Any] = {
        "type": f"response.steer.{kind}",
        "sequence_number": seq,
        "steer": {"id": "steer_1", "previous_response_id": rid},
    }
    if kind == "pending":
        event["reason"] = "waiting_for_required_input"
        event["required_input"] = [{"type": "function_call_output", "call_id": "call_1"}]
    if kind == "failed":
        event["steer"]["input"] = "In French."
        event["error"] = {
            "type": "invalid_request_error",
            "code": "successor_creation_failed",
            "message": "The successor response could not be created.",
        }
    return "u", lane(event, stream_id)


@pytest.mark.parametrize("answer_seq", [2, 0], ids=["in-the-responses-numbering", "its-own"])
def test_a_steered_response_hands_over_to_the_successor_the_server_makes(answer_seq: int) -> None:
    judge = ResponsesJudge()
    ended = feed(
        judge,
        create(),
        created("resp_1"),
        delta("Roses", 1),
        steer("resp_1"),
        answer("accepted", "resp_1", answer_seq),
        steered("resp_1", 2 if answer_seq == 0 else 3),
        created("resp_2"),  # no response.create asked for it: the server's successor
        delta("Les roses", 1),
        completed("resp_2", 2),
    )
    first, second = ended
    v = first.verdict
    assert (v.state, v.finish_reason, v.finish_category) == ("incomplete", "steered", "pause")
    assert (v.anomalies, v.text_chars, v.response_id) == ({}, 5, "resp_1")
    assert second.continues == HandOver(1, "resp_1") and first.continues is None
    assert (second.verdict.state, second.verdict.text_chars) == ("completed", 9)
    assert (second.number, second.model, second.verdict.anomalies) == (2, "gpt-5.5", {})
    assert judge.steering == {"sent": 1, "accepted": 1}
    assert judge.anomalies == {} and judge.turns == 2 and not judge.open


def test_a_completion_with_steering_queued_is_followed_by_its_automatic_successor() -> None:
    """ "Normal completion can also be followed by an automatic successor.\""""
    ended = feed(
        ResponsesJudge(),
        create(),
        created("resp_1"),
        steer("resp_1"),
        answer("accepted", "resp_1", 1),
        completed("resp_1", 2),
        created("resp_2"),
        completed("resp_2", 1),
    )
    assert [(t.verdict.state, t.continues) for t in ended] == [
        ("completed", None),
        ("completed", HandOver(1, "resp_1")),
    ]


def test_pending_steering_is_continued_by_the_clients_own_create() -> None:
    """`response.steer.pending`: the client sends one explicit create per parent; the
    response answering it is its own, not a server-made successor."""
    judge = ResponsesJudge()
    ended = feed(
        judge,
        create(),
        created("resp_1"),
        steer("resp_1"),
        answer("accepted", "resp_1", 1),
        completed("resp_1", 2),
        answer("pending", "resp_1", 3),
        create(previous_response_id="resp_1", model="gpt-5.5-mini"),
        created("resp_2"),
        completed("resp_2", 1),
    )
    assert [(t.continues, t.model) for t in ended] == [(None, "gpt-5.5"), (None, "gpt-5.5-mini")]
    assert judge.steering == {"sent": 1, "accepted": 1, "pending": 1}


def test_failed_steering_after_a_steered_end_leaves_no_successor_to_wait_for() -> None:
    judge = ResponsesJudge()
    ended = feed(
        judge,
        create(),
        created("resp_1"),
        steer("resp_1"),
        answer("accepted", "resp_1", 1),
        steered("resp_1", 2),
        answer("failed", "resp_1", 3),  # successor_creation_failed
        create(),
        created("resp_2"),
        completed("resp_2", 1),
    )
    assert [t.continues for t in ended] == [None, None]
    assert judge.steering == {"sent": 1, "accepted": 1, "failed": 1}
    assert judge.anomalies == {}


def test_lanes_run_at_once_and_each_event_goes_to_its_lanes_turn() -> None:
    judge = ResponsesJudge()
    ended = feed(
        judge,
        create("a"),
        create("b"),
        created("resp_a", 0, "a"),
        created("resp_b", 0, "b"),
        delta("aaa", 1, "a"),
        delta("bb", 1, "b"),
        completed("resp_b", 2, "b"),
        delta("a", 2, "a"),
        completed("resp_a", 3, "a"),
    )
    assert judge.anomalies == {}  # no active_response_conflict: two lanes
    summary = [(t.number, t.lane, t.verdict.response_id, t.verdict.text_chars) for t in ended]
    assert summary == [(2, "b", "resp_b", 2), (1, "a", "resp_a", 4)]
    assert all(t.verdict.state == "completed" and not t.verdict.anomalies for t in ended)


def test_one_lane_runs_its_responses_first_in_first_out() -> None:
    judge = ResponsesJudge()
    ended = feed(
        judge,
        create("a", input="one"),
        create("a", input="two"),  # queued behind the first: no conflict
        created("resp_1", 0, "a"),
        delta("1", 1, "a"),
        completed("resp_1", 2, "a"),
        created("resp_2", 0, "a"),
        delta("22", 1, "a"),
        completed("resp_2", 2, "a"),
    )
    assert [(t.number, t.verdict.response_id, t.verdict.text_chars) for t in ended] == [
        (1, "resp_1", 1),
        (2, "resp_2", 2),
    ]
    assert judge.anomalies == {} and all(t.lane == "a" for t in ended)


def test_the_unnamed_lane_still_runs_one_response_at_a_time() -> None:
    judge = ResponsesJudge()
    feed(judge, create(), create("a"), create())
    assert judge.anomalies == {"active_response_conflict": 1} and judge.turns == 2


def test_a_steered_turn_on_a_lane_hands_over_on_that_lane_only() -> None:
    judge = ResponsesJudge()
    ended = feed(
        judge,
        create("a"),
        create("b"),
        created("resp_a", 0, "a"),
        created("resp_b", 0, "b"),
        steer("resp_a"),
        answer("accepted", "resp_a", 1, "a"),
        steered("resp_a", 2, "a"),
        created("resp_a2", 0, "a"),
        completed("resp_b", 1, "b"),
        completed("resp_a2", 1, "a"),
    )
    assert [(t.lane, t.verdict.response_id, t.continues) for t in ended] == [
        ("a", "resp_a", None),
        ("b", "resp_b", None),
        ("a", "resp_a2", HandOver(1, "resp_a")),
    ]
    assert judge.anomalies == {}


def test_an_error_names_its_lane_and_ends_that_lanes_turn() -> None:
    judge = ResponsesJudge()
    error = {"type": "error", "stream_id": "b", "error": {"type": "server_error"}}
    ended = feed(judge, create("a"), create("b"), ("u", error))
    assert [(t.lane, t.verdict.state) for t in ended] == [("b", "failed")]
    assert list(judge.open) == [1]


def test_lane_names_are_bounded_at_their_length_and_one_more() -> None:
    judge = ResponsesJudge()
    at, over = "x" * MAX_LANE_CHARS, "y" * (MAX_LANE_CHARS + 1)
    ended = feed(judge, create(at), completed("r1", 0, at), create(over), completed("r2", 0, over))
    assert [t.lane for t in ended] == [at, "y" * MAX_LANE_CHARS]


def test_lanes_kept_are_bounded_at_the_limit_and_one_more() -> None:
    judge = ResponsesJudge()
    for n in range(MAX_LANES):
        feed(judge, create(f"l{n}"), created(f"r{n}", 0, f"l{n}"), completed(f"r{n}", 1, f"l{n}"))
    assert len(judge.lanes) == MAX_LANES and "l0" in judge.lanes
    [turn] = feed(judge, create("new"), completed("r", 0, "new"))
    assert len(judge.lanes) == MAX_LANES and "l0" not in judge.lanes  # the oldest idle one
    assert turn.lane == "new" and judge.turns == MAX_LANES + 1


def test_busy_lanes_are_bounded_by_the_open_turns() -> None:
    judge = ResponsesJudge()
    feed(judge, *(create(f"l{n}") for n in range(MAX_OPEN_TURNS + 1)))
    assert len(judge.open) == MAX_OPEN_TURNS
    assert judge.anomalies == {"too_many_open_turns": 1}


def test_the_injection_answers_are_session_events_not_a_responses() -> None:
    judge = ResponsesJudge()
    injected = {"type": "response.inject.created", "response_id": "resp_1", "sequence_number": 2}
    ended = feed(judge, create(), created("resp_1"), delta("a", 1), ("u", injected))
    ended += feed(judge, delta("b", 3), completed("resp_1", 4))
    [turn] = ended
    assert turn.verdict.anomalies == {} and turn.verdict.events == 4
