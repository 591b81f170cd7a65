"""The record as people and pipelines read it: redaction, one line each, no forged records."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
import structlog

from sseproxy.observe import log

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


class Terminal(io.StringIO):
    """An in-memory stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_colours_unless_they_are_turned_off() -> None:
    """NO_COLOR reaches here as `color=False` (the command line reads the environment)."""
    lines = {}
    for color in (True, False):
        stream = Terminal()
        log.configure("auto", "debug", stream, cache=False, color=color)
        structlog.get_logger("t").error("request.finished", **RECORD)
        lines[color] = stream.getvalue()
    assert "\x1b[" in lines[True]  # the premise: a terminal is coloured
    assert "\x1b[" not in lines[False] and "interrupted" in lines[False]  # the console format


def test_a_stream_that_is_no_terminal_never_gets_colours() -> None:
    for fmt in ("auto", "console"):
        stream = io.StringIO()
        log.configure(fmt, "debug", stream, cache=False, color=True)
        structlog.get_logger("t").error("request.finished", **RECORD)
        assert "\x1b[" not in stream.getvalue() and "interrupted" in stream.getvalue()


def printed(stdout: str, color: bool) -> str:
    """What a process configured with `color` prints on a real terminal or pipe as stdout."""
    program = (
        "import structlog\n"
        "from sseproxy.observe import log\n"
        f"log.configure('auto', 'info', color={color})\n"
        "structlog.get_logger().error('proxy.started', port=1)\n"
        "log.finish()\n"
    )
    if stdout == "pipe":
        run = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60)
        return run.stdout.decode()
    import pty

    leader, follower = pty.openpty()
    try:
        subprocess.run([sys.executable, "-c", program], stdout=follower, timeout=60, check=True)
        return os.read(leader, 65536).decode()
    finally:
        os.close(leader)
        os.close(follower)


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX")
def test_a_real_terminal_is_coloured_and_a_pipe_or_color_false_is_not() -> None:
    assert "\x1b[" in printed("terminal", True)  # the premise
    for stdout, color in (("terminal", False), ("pipe", True)):
        text = printed(stdout, color)
        assert "proxy.started" in text and "\x1b[" not in text, stdout


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


def test_key_shapes_of_every_default_provider_are_redacted() -> None:
    keys = {
        "openai": "sk-abcdefghijklmnopqrstuvwx0123",
        "openai-project": "sk-proj-Abc_def-0123456789",
        "anthropic": "sk-ant-api03-abcdefghij_KLM",
        "groq": "gsk_abcdefghijklmnop0123",
        "xai": "xai-abcdefghijklmnop0123",
        "google": "AIzaSyA12345678901234567890",
        "replicate": "r8_abcdefghijklmnop0123",
        "huggingface": "hf_abcdefghijklmnop0123",
    }
    note = " ".join(f"{name}={key}" for name, key in keys.items())
    for fmt in ("json", "console"):
        out = emit(fmt, note=note, error={"message": "Incorrect API key provided: " + keys["groq"]})
        for key in keys.values():
            assert key not in out
            assert key[-8:] not in out
    record = json.loads(emit("json", note=note))
    assert record["note"].startswith("openai=[redacted] openai-project=[redacted]")


def test_ordinary_words_with_key_prefixes_are_kept() -> None:
    text = "sk-learn hf_hub_download task-abcdefghijkl xai-grok bearer token mask-abcdefghij"
    assert json.loads(emit("json", note=text))["note"] == text


def test_a_lone_surrogate_is_replaced_and_the_record_kept() -> None:
    record = json.loads(emit("json", **{**RECORD, "model": "\ud800", "response_model": "a\udfffb"}))
    assert record["model"] == "\ufffd"
    assert record["response_model"] == "a\ufffdb"
    assert record["state"] == "interrupted" and record["bytes"] == 2048  # nothing else lost


def test_an_integer_beyond_64_bits_is_written_as_its_digits() -> None:
    usage = {"prompt_tokens": 2**64, "completion_tokens": -(2**63) - 1, "total_tokens": 7}
    record = json.loads(emit("json", **{**RECORD, "usage": usage}))
    assert record["usage"] == {
        "prompt_tokens": "18446744073709551616",
        "completion_tokens": "-9223372036854775809",
        "total_tokens": 7,
    }


def test_a_non_utf8_byte_in_a_header_value_is_shown_as_that_byte() -> None:
    # aiohttp decodes header bytes that are not UTF-8 with surrogateescape: b"caf\xe9" -> this.
    content_type = b"text/event-stream; x=caf\xe9".decode("utf-8", "surrogateescape")
    fields = {**RECORD, "content_type": content_type, "upstream_request_id": b"id-\xff"}
    record = json.loads(emit("json", **fields))
    assert record["content_type"] == "text/event-stream; x=caf\\xe9"
    assert record["upstream_request_id"] == "id-\\xff"
    line = emit("console", **{**fields, "path": "/v1/caf\udce9"})
    assert "/v1/caf\\xe9" in line and line.count("\n") == 1


def test_nan_and_infinity_are_written_as_null() -> None:
    fields = {**RECORD, "ttft_ms": float("nan"), "usage": {"cost": float("inf")}}
    record = json.loads(emit("json", **fields))
    assert record["ttft_ms"] is None and record["usage"] == {"cost": None}
    # with a value orjson refuses in the same record, the rebuilt record says the same
    record = json.loads(emit("json", **{**fields, "model": "\ud800"}))
    assert record["ttft_ms"] is None and record["usage"] == {"cost": None}


def test_nesting_beyond_what_orjson_writes_is_cut_not_dropped() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(400):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    record = json.loads(emit("json", **{**RECORD, "usage": {"raw": deep}}))
    assert record["state"] == "interrupted"
    assert "[too deep]" in json.dumps(record)


class FailingStream(io.StringIO):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc
        self.attempts = 0

    def write(self, text: str) -> int:
        self.attempts += 1
        raise self.exc


def test_a_failing_output_never_raises_into_the_caller_and_is_reported_once(capsys) -> None:
    for exc in (BrokenPipeError(32, "Broken pipe"), ValueError("I/O operation on closed file")):
        stream = FailingStream(exc)
        for fmt in ("json", "console"):
            log.configure(fmt, "debug", stream, cache=False)
            logger = structlog.get_logger("t")
            logger.error("request.finished", **RECORD)
            logger.info("proxy.stopped")
        assert stream.attempts == 4  # every record was tried; none raised
        err = capsys.readouterr().err
        assert err.count("log output failed") == 2  # once per configured output
        assert type(exc).__name__ in err


def test_a_closed_stream_is_reported_not_raised(capsys) -> None:
    stream = io.StringIO()
    log.configure("json", "debug", stream, cache=False)
    stream.close()
    structlog.get_logger("t").error("request.finished", **RECORD)
    structlog.get_logger("t").error("request.finished", **RECORD)
    assert capsys.readouterr().err.count("I/O operation on closed file") == 1


def test_a_broken_stdout_pipe_is_reported_once_and_the_process_exits_cleanly() -> None:
    program = (
        "import structlog\n"
        "from sseproxy.observe import log\n"
        "log.configure('json', 'info')\n"
        "for i in range(3):\n"
        "    structlog.get_logger().info('request.finished', n=i)\n"
        "__import__('sys').stderr.write('done\\n')\n"
    )
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first record
    try:
        result = subprocess.run(
            [sys.executable, "-c", program],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    # stdout's writer thread reports it, before or after the program's own last line
    lines = [line for line in result.stderr.splitlines() if line != "done"]
    assert result.stderr.splitlines().count("done") == 1
    assert len(lines) == 1  # once, then every later record dropped without a word
    assert lines[0].startswith("sseproxy: log output failed (BrokenPipeError")
    assert result.returncode == 0


def test_a_drill_is_marked_on_the_console_line() -> None:
    """A drill's injected reset reads `cut=upstream_reset` as a real one does: the mark is
    what tells them apart."""
    real = emit("console", **RECORD)
    drill = emit("console", **{**RECORD, "injected": ["reset:after_events=3"]})
    assert "[drill]" in drill and "cut=upstream_reset" in drill
    assert "[drill]" not in real


# Every character str.splitlines() splits on (the ASCII ones JSON escapes anyway).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def test_no_character_splitlines_splits_on_is_written_raw() -> None:
    text = f"a{LINE_BREAKS}b"
    assert len(text.splitlines()) > 1  # the premise
    for line in (emit("json", **{**RECORD, "path": text}), log.dumps({"text": text})):
        assert line.rstrip("\n").splitlines() == [line.rstrip("\n")]
        assert json.loads(line)["path" if "path" in line else "text"] == text


def test_the_direct_record_line_is_one_line_too() -> None:
    """The request record's own path (a prebuilt rendering spliced into the line)."""
    stream = io.StringIO()
    log.configure("json", "info", stream, cache=False)
    record = {**RECORD, "path": "/v1/x\u2028y\x85"}
    ready, rendered = log.json_rendered(record)
    assert rendered is not None
    log.request_finished(ready, log.logging.WARNING, rendered)
    line = stream.getvalue()
    assert line.rstrip("\n").splitlines() == [line.rstrip("\n")]
    assert json.loads(line)["path"] == "/v1/x\u2028y\x85"
