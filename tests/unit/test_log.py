"""The record as people and pipelines read it: redaction, one line each, no forged records."""

from __future__ import annotations

import io
import json

import structlog

from sseproxy import log

RECORD = {
    "state": "interrupted",
    "dialect": "openai-chat",
    "model": "gpt-4o",
    "status": 200,
    "finish_reason": None,
    "ttft_ms": 312.5,
    "duration_ms": 4210.0,
    "bytes": 2048,
    "interruption": {"reason": "upstream_reset", "partial_event_bytes": 17},
    "anomalies": {"partial_event_discarded": 1},
    "method": "POST",
    "path": "/v1/chat/completions",
}


def emit(fmt: str, **fields) -> str:
    stream = io.StringIO()
    log.configure(fmt, "debug", stream, cache=False)
    structlog.get_logger("t").error("request.finished", **fields)
    return stream.getvalue()


def test_console_line_is_a_readable_summary() -> None:
    line = emit("console", **RECORD)
    assert line.count("\n") == 1
    for fragment in (
        "interrupted",
        "openai-chat",
        "gpt-4o",
        "200",
        "ttft=312ms",
        "dur=4.21s",
        "cut=upstream_reset",
        "anomalies=partial_event_discarded",
        "POST /v1/chat/completions",
    ):
        assert fragment in line
    assert "\x1b[" not in line  # no colours when the stream is not a terminal


def test_control_characters_cannot_forge_records() -> None:
    evil = '/v1/x\n{"event": "request.finished", "state": "completed"}\r\x1b[2J'
    for fmt in ("json", "console"):
        out = emit(fmt, **{**RECORD, "path": evil})
        assert out.count("\n") == 1
        assert "\x1b" not in out and "\r" not in out
    record = json.loads(emit("json", **{**RECORD, "path": evil}))
    assert record["path"] == evil  # JSON keeps the value exactly, escaped


def test_secrets_are_redacted_by_key_and_by_shape() -> None:
    for fmt in ("json", "console"):
        out = emit(
            fmt,
            authorization="Bearer abcdefghijklmnop",
            headers={"x-api-key": "sk-ant-secret", "accept": "x"},
            note="called with sk-proj-abcdefghijklmnop and AIzaSyA12345678901234567890",
        )
        for secret in ("abcdefghijklmnop", "sk-ant-secret", "AIzaSyA12345678901234567890"):
            assert secret not in out


def test_redact_query() -> None:
    assert log.redact_query("alt=sse&key=AIza123&API_KEY=x&k%65y=y") == (
        "alt=sse&key=[redacted]&API_KEY=[redacted]&k%65y=[redacted]"
    )


def test_levels_follow_the_state() -> None:
    assert [
        log.level_for(s) for s in ("completed", "incomplete", "cancelled", "failed", "http_error")
    ] == [20, 30, 30, 40, 40]
