"""The inspector's session model: each bound (sessions, messages per session, characters per
message, the shared byte budget) holds at its value and one more is counted, audio is never
kept, credentials are masked, and a session's turns go under it and out with it."""

from __future__ import annotations

import time
from collections import Counter

from sseproxy.inspector.endpoints import ByteBudget, Inspector
from sseproxy.inspector.sessions import SessionRetention, SessionView
from sseproxy.observe.redact import Secrets


def view(sid: str = "s1", budget: ByteBudget | None = None, **retention: int) -> SessionView:
    v = SessionView(sid, "/v1/realtime", time.time(), time.monotonic(), budget=budget)
    v.retention = SessionRetention(**retention)
    return v


def text(v: SessionView, data: bytes, name: str | None = "x", direction: str = "upstream") -> None:
    v.message(time.monotonic(), direction, "text", len(data), name, None, data)


def test_messages_beyond_the_bound_are_counted_not_listed() -> None:
    v = view(messages=3)
    for i in range(3):
        text(v, b"{}", f"m{i}")
    assert v.detail(False)["messages_omitted"] == 0
    text(v, b"{}", "one more")
    detail = v.detail(False)
    assert [m["type"] for m in detail["message_list"]] == ["m0", "m1", "m2"]
    assert detail["messages_omitted"] == 1


def test_a_message_shows_its_first_chars_and_says_when_it_was_cut() -> None:
    v = view(budget=ByteBudget(1 << 20), chars=5)
    text(v, b"abcde")
    text(v, b"abcdef")
    exact, longer = v.detail(True)["message_list"]
    assert (exact["data"], exact["truncated"]) == ("abcde", False)
    assert (longer["data"], longer["truncated"]) == ("abcde", True)
    assert longer["size"] == 6


def test_kept_data_counts_against_the_shared_budget_and_is_given_back() -> None:
    budget = ByteBudget(10)
    v = view(budget=budget)
    text(v, b"0123456789")  # exactly the budget
    text(v, b"x")  # one more byte: listed, its data not kept
    assert budget.used == 10
    first, second = v.detail(True)["message_list"]
    assert first["data"] == "0123456789" and "data" not in second
    assert v.detail(True)["messages_unkept"] == 1
    v.let_go()
    assert budget.used == 0 and v.detail(True)["retained"] == "gone"


def test_audio_is_never_kept_only_its_size() -> None:
    v = view(budget=ByteBudget(1 << 20))
    text(v, b'{"type":"response.output_audio.delta","delta":"AAAA"}', "response.output_audio.delta")
    text(v, b'{"type":"input_audio_buffer.append","audio":"AAAA"}', "input_audio_buffer.append")
    text(v, b'{"realtimeInput":{"audio":{"data":"AAAA"}}}', "realtimeInput")
    text(v, b'{"serverContent":{"modelTurn":{"parts":[{"inlineData":{}}]}}}', "serverContent")
    text(v, b'{"serverContent":{"turnComplete":true}}', "serverContent")
    messages = v.detail(True)["message_list"]
    assert [m.get("audio", False) for m in messages] == [True, True, True, True, False]
    assert [("data" in m) for m in messages] == [False, False, False, False, True]


def test_without_keep_content_no_data_is_kept() -> None:
    v = view()
    text(v, b'{"type":"x"}')
    [message] = v.detail(False)["message_list"]
    assert "data" not in message and v.detail(False)["retained"] == "off"


def test_credentials_in_a_message_are_masked() -> None:
    v = view(budget=ByteBudget(1 << 20))
    v.secrets = Secrets(("ek_secretvalue123",))
    text(v, b'{"key":"ek_secretvalue123"}', direction="client")
    [message] = v.detail(True)["message_list"]
    assert "ek_secretvalue123" not in message["data"] and message["direction"] == "client"


class Live:
    def __init__(self) -> None:
        self.messages: Counter[str] = Counter(client=2, upstream=5)
        self.sizes: Counter[str] = Counter(client=30, upstream=400)
        self.turns = 3


def test_a_running_sessions_row_reads_its_counters_and_its_record_once_closed() -> None:
    v = view()
    v.live = Live()
    row = v.row()
    assert (row["state"], row["turns"], row["messages"]) == (
        "open",
        3,
        {"client": 2, "upstream": 5},
    )
    assert row["bytes"] == {"client": 30, "upstream": 400}
    record = {
        "turns": 3,
        "messages": {"client": 2, "upstream": 6},
        "bytes": {},
        "close_code": 1000,
        "close_reason": "bye",
        "closed_by": "client",
        "anomalies": {"go_away": 1},
    }
    v.finish(record)
    row = v.row()
    assert (row["state"], row["close_code"], row["closed_by"]) == ("closed", 1000, "client")
    assert row["messages"] == {"client": 2, "upstream": 6} and row["anomalies"] == {"go_away": 1}


def turn_record(sid: str, n: int, state: str = "completed") -> dict[str, object]:
    return {"method": "GET", "path": "/v1/realtime", "state": state, "session_id": sid, "turn": n}


def test_sessions_beyond_the_bound_drop_out_with_their_turns() -> None:
    inspector = Inspector(session_retention=SessionRetention(sessions=2))
    first = view("s1")
    inspector.session_started(first)
    inspector.finished("t1", turn_record("s1", 1), None)
    inspector.session_started(view("s2"))
    assert list(inspector.sessions) == ["s1", "s2"] and "t1" in inspector.streams
    assert inspector.streams["t1"].row()["session_id"] == "s1"
    assert first.row()["last_state"] == "completed"
    inspector.session_started(view("s3"))  # one more
    assert list(inspector.sessions) == ["s2", "s3"]
    assert "t1" not in inspector.streams  # no turn row is left without its session


def test_the_feed_and_the_first_paint_carry_sessions_before_their_turns() -> None:
    inspector = Inspector()
    inspector.session_started(view("s1"))
    inspector.finished("t1", turn_record("s1", 1, "interrupted"), None, started_at=time.time())
    inspector.session_finished("s1", {"turns": 1, "close_code": 1011, "closed_by": "upstream"})
    assert [v.request_id for v in inspector.rows()] == ["s1", "t1"]
    assert not inspector.live_sessions
    assert inspector.sessions["s1"].row()["last_state"] == "interrupted"


def test_a_close_is_listed_with_its_code_and_its_frames_size() -> None:
    v = view()
    v.message(time.monotonic(), "upstream", "close", 3, "1000", None, b"bye")
    v.message(time.monotonic(), "client", "close", 0, None, None, b"")  # no status at all
    with_code, without = v.detail(False)["message_list"]
    assert (with_code["type"], with_code["size"]) == ("1000", 5)
    assert (without["type"], without["size"]) == (None, 0)
