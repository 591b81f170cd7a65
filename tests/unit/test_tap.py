"""StreamTap: the guard, content encodings, JSON bodies, and the purity of the core."""

from __future__ import annotations

import ast
import gzip
import io
import json
import zlib
from pathlib import Path

import pytest

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions
from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler
from sseproxy.tools.replay import ReplayOptions, replay
from tests.streams import sse

DONE_STREAM = sse(
    {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    "[DONE]",
)


def broken(self, event):  # a stand-in for a bug in an assembler
    raise KeyError("bug")


def test_a_core_bug_is_absorbed_and_never_reported_as_success(monkeypatch) -> None:
    monkeypatch.setattr(OpenAIChatAssembler, "on_event", broken)
    tap = StreamTap(Dialect.OPENAI_CHAT)
    assert tap.feed(DONE_STREAM) == 0
    tap.feed(b"more bytes")
    v = tap.close(EndReason.UPSTREAM_CLOSED)
    assert v.state == "unconfirmed"
    assert v.anomalies["core_error"] == 1
    assert v.bytes == len(DONE_STREAM) + 10


def test_strict_mode_lets_the_bug_surface(monkeypatch) -> None:
    monkeypatch.setattr(OpenAIChatAssembler, "on_event", broken)
    with pytest.raises(KeyError):
        StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True)).feed(DONE_STREAM)


def test_a_bug_in_conclude_still_yields_a_verdict(monkeypatch) -> None:
    monkeypatch.setattr(OpenAIChatAssembler, "conclude", broken)
    tap = StreamTap(Dialect.OPENAI_CHAT)
    tap.feed(DONE_STREAM)
    v = tap.close()
    assert v.state == "unconfirmed"
    assert v.anomalies["core_error"] == 1


def test_close_is_idempotent() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    tap.feed(DONE_STREAM)
    assert tap.close() is tap.close(EndReason.UPSTREAM_RESET)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_compressed_bodies_are_analysed_decompressed(encoding: str) -> None:
    if encoding == "gzip":
        data = gzip.compress(DONE_STREAM)
    elif encoding == "deflate":
        data = zlib.compress(DONE_STREAM)
    else:
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        data = c.compress(DONE_STREAM) + c.flush()
        encoding = "deflate"
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding=encoding)
    for i in range(len(data)):
        tap.feed(data[i : i + 1])
    v = tap.close()
    assert (v.state, v.text_chars, v.bytes) == ("completed", 2, len(data))


def test_corrupt_gzip_is_reported_not_guessed() -> None:
    data = gzip.compress(DONE_STREAM)
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip")
    tap.feed(data[:10] + b"\x00garbage" + data[10:])
    v = tap.close()
    assert v.state == "unconfirmed"
    assert v.anomalies["content_decoding_error"] == 1


def test_truncated_gzip_is_flagged() -> None:
    data = gzip.compress(DONE_STREAM)
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip")
    tap.feed(data[:-6])
    v = tap.close()
    assert v.anomalies["truncated_compressed_body"] == 1


def test_unknown_encoding_is_reported() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="zstd-ish")
    tap.feed(b"\x28\xb5\x2f\xfd")
    v = tap.close()
    assert v.state == "unconfirmed"
    assert v.anomalies["content_decoding_error"] == 1


def test_feed_reports_content_deltas() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    assert (
        tap.feed(b': ping\n\ndata: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n') == 0
    )
    assert tap.feed(b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n') == 1


def test_json_body_over_the_cap_is_not_guessed() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(max_body_bytes=100))
    tap.feed(b'{"choices": [' + b" " * 200 + b"]}")
    v = tap.close()
    assert v.state == "unconfirmed"
    assert v.anomalies["body_too_large_to_analyse"] == 1


def test_replay_exit_codes_and_events(tmp_path: Path) -> None:
    out = io.StringIO()
    assert replay(DONE_STREAM, ReplayOptions(events=True, chunk_size=3), out) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[-1]["state"] == "completed"
    assert [e["data"] for e in lines[:-1]][-1] == "[DONE]"
    assert set(lines[0]) == {"type", "data", "id"}
    out = io.StringIO()
    assert replay(DONE_STREAM[:30], ReplayOptions(), out) == 1


def test_replay_cli_usage_errors(tmp_path: Path, capsys) -> None:
    from sseproxy.cli import main

    assert main(["replay", str(tmp_path / "missing.sse")]) == 2
    assert "cannot read" in capsys.readouterr().err
    good = tmp_path / "s.sse"
    good.write_bytes(DONE_STREAM)
    assert main(["replay", str(good), "--chunk-size", "0"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(good), "--dialect", "nope"])
    assert exc.value.code == 2
    assert main(["replay", str(good), "--random-chunks", "3", "--dialect", "openai-chat"]) == 0


FORBIDDEN = {"asyncio", "aiohttp", "structlog", "os", "time", "socket", "logging", "datetime"}


def test_core_is_pure() -> None:
    """Nothing under sseproxy/core imports I/O, clocks, the environment or logging."""
    core = Path(__file__).resolve().parents[2] / "sseproxy" / "core"
    for path in core.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                # relative imports would hide where a name comes from: the core has none
                assert node.level == 0, f"{path.name} imports relatively"
                names = [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_replay_events_are_one_line_each_whatever_the_text_holds() -> None:
    """`replay --events | while read`: a U+2028 in a delta must not split its event's line."""
    body = sse('{"choices":[{"delta":{"content":"a\u2028b\x85c"}}]}', "[DONE]")
    out = io.StringIO()
    replay(body, ReplayOptions(events=True), out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # two events, the verdict
    assert "a\u2028b\x85c" in json.loads(lines[0])["data"]
