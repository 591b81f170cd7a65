"""The session capture's pure parts: audio taken out and put back, lines as written."""

from __future__ import annotations

import base64
import json

from sseproxy.capture.sessions import Direction, Kind, Line, line_json, with_audio, without_audio
from sseproxy.core.sessions.base import audio_bytes
from sseproxy.observe.redact import Secrets

PCM = base64.b64encode(bytes(4801)).decode()  # one byte past a multiple of 3: padded


def test_realtime_audio_deltas_lose_their_base64_and_keep_its_size() -> None:
    message = json.dumps(
        {"type": "response.output_audio.delta", "response_id": "r", "delta": PCM}
    ).encode()
    kept, sizes = without_audio(message)
    assert sizes == (4801,) and PCM not in kept.decode()
    assert json.loads(kept)["delta"] == ""
    back = with_audio(json.loads(kept), list(sizes))
    assert audio_bytes(back["delta"]) == 4801  # the judge counts what the session had


def test_client_audio_of_both_dialects_is_taken_out() -> None:
    append = json.dumps({"type": "input_audio_buffer.append", "audio": PCM}).encode()
    live = json.dumps(
        {"realtimeInput": {"audio": {"data": PCM}, "mediaChunks": [{"data": PCM}]}}
    ).encode()
    assert without_audio(append)[1] == (4801,)
    kept, sizes = without_audio(live)
    assert sizes == (4801, 4801) and PCM not in kept.decode()


def test_a_message_without_audio_is_kept_as_its_bytes() -> None:
    text = b'{"type":"response.output_text.delta",  "delta":"audio"}'
    assert without_audio(text) == (text, ())
    broken = b'{"type":"response.audio.delta","delta":"AAA'  # not JSON: kept as it came
    assert without_audio(broken) == (broken, ())


def test_a_line_is_text_when_utf8_else_base64_and_masked_either_way() -> None:
    key = "ek_68af296e8e408191a1120ab6383263c2"
    secrets = Secrets((key,))
    text = Line(1.5, Direction.UPSTREAM, Kind.TEXT, 40, f"héllo {key}".encode())
    got = json.loads(line_json(text, secrets))
    assert got == {
        "t_ms": 1.5,
        "dir": "upstream",
        "kind": "text",
        "size": 40,
        "data": "héllo " + "*" * len(key),
    }
    raw = Line(2.0, Direction.UPSTREAM, Kind.BINARY, 36, b"\xff" + key.encode())
    got = json.loads(line_json(raw, secrets))
    assert got["encoding"] == "base64"
    assert base64.b64decode(got["data"]) == b"\xff" + b"*" * len(key)
    close = Line(3.0, Direction.CLIENT, Kind.CLOSE, 0, None, code=4000, reason=f"no {key}")
    got = json.loads(line_json(close, secrets))
    assert (got["code"], got["reason"], "data" in got) == (4000, "no " + "*" * len(key), False)


def test_turn_records_past_the_bound_are_counted_not_kept(monkeypatch) -> None:
    from pathlib import Path

    from sseproxy.capture import sessions as session_capture
    from sseproxy.capture.format import CaptureSettings
    from sseproxy.capture.sessions import SessionCapture

    monkeypatch.setattr(session_capture, "MAX_TURN_RECORDS", 2)
    cap = SessionCapture(CaptureSettings(Path(".")), "s", 0.0)
    for n in range(3):
        cap.turn({"turn": n + 1})
    assert (cap.turns, cap.turns_dropped) == ([{"turn": 1}, {"turn": 2}], 1)


def test_a_replay_without_every_turn_record_compares_the_session_counts() -> None:
    import io

    from sseproxy.capture.sessions import SessionFile
    from sseproxy.tools.session_replay import replay_session

    created = {"type": "response.created", "response": {"id": "r"}}
    done = {"type": "response.done", "response": {"id": "r", "status": "completed"}}
    lines = [
        {"t_ms": 0, "dir": "upstream", "kind": "text", "size": 9, "data": json.dumps(m)}
        for m in (created, done)
    ]
    sidecar = {
        "dialect": "openai-realtime",
        "end": "client_disconnected",
        "turn_records": [],
        "turn_records_dropped": 1,
        "session": {"states": {"completed": 1}, "closed_by": "client"},
    }
    out = io.StringIO()
    assert replay_session(SessionFile(sidecar, lines), out, io.StringIO()) == 0
    sidecar["session"] = {"states": {"failed": 1}}
    assert replay_session(SessionFile(sidecar, lines), io.StringIO(), io.StringIO()) == 1
