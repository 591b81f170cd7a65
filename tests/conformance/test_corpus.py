"""Every recorded stream in the corpus gets the verdict its MANIFEST expects,
however the bytes are chunked, and through the `replay` command as well."""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import pytest

from sseproxy.core import StreamTap, TapOptions, Verdict
from sseproxy.tools.replay import ReplayOptions, replay
from tests.corpus import body, manifest
from tests.streams import random_split

ENTRIES = manifest()


def split(data: bytes, how: str) -> list[bytes]:
    if how == "whole":
        return [data]
    if how == "bytewise":
        return [data[i : i + 1] for i in range(len(data))]
    return random_split(data, how, 97)


def analyse(data: bytes, how: str) -> tuple[StreamTap, Verdict]:
    tap = StreamTap(options=TapOptions(strict=True))
    for chunk in split(data, how):
        tap.feed(chunk)
    return tap, tap.close()


def first_reason(verdict: Verdict) -> Any:
    return verdict.finish_reasons[0] if verdict.finish_reasons else verdict.finish_reason


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
@pytest.mark.parametrize("how", ["whole", "bytewise", "seed-1", "seed-2"])
def test_corpus_verdict(entry: dict[str, Any], how: str) -> None:
    expected = entry["expected"]
    tap, verdict = analyse(body(entry), how)
    assert verdict.state == expected["state"]
    assert first_reason(verdict) == expected["finish_reason"]
    text = tap.primary_text()
    assert len(text) == expected["text_length"]
    assert hashlib.sha256(text.encode()).hexdigest() == expected["text_sha256"]
    calls = [(c.name, c.arguments_valid_json) for c in verdict.tool_calls]
    assert calls == [(c["name"], c["args_valid_json"]) for c in expected["tool_calls"]]
    described = tap.describe()["tool_calls"]
    for got, want in zip(described, expected["tool_calls"], strict=True):
        if "arguments" in want:
            assert got["arguments"] == want["arguments"]
        else:
            assert len(got["arguments"]) == want["arguments_length"]
    assert verdict.events == expected["event_count"]
    assert verdict.last_event == expected["last_event"]
    assert verdict.reasoning_chars == expected["reasoning_chars"]
    discarded = "partial_event_discarded" in verdict.anomalies
    assert discarded == expected["unterminated_tail"]
    if expected["state"] == "interrupted":
        assert verdict.interruption is not None
    if "refusal_text" in expected:
        assert tap.describe()["refusal"] == expected["refusal_text"]
    if expected.get("error"):
        assert verdict.error is not None
        assert verdict.error.message == expected["error"]["message"]
    if "choices" in expected:
        reasons = [c["finish_reason"] for c in expected["choices"].values()]
        assert list(verdict.finish_reasons or ()) == reasons
    if "server_tool_calls" in expected:
        assert list(verdict.server_tool_calls) == expected["server_tool_calls"]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
def test_usage_reported(entry: dict[str, Any]) -> None:
    """Usage is reported when the stream carried one. Deliberate difference: an Anthropic
    stream cut before `message_delta` still reports the input tokens of `message_start`."""
    _, verdict = analyse(body(entry), "whole")
    expected = entry["expected"]["usage_reported"]
    if entry["dialect"] == "anthropic-messages" and not expected:
        assert verdict.usage is None or verdict.usage.output_tokens is not None
    else:
        assert (verdict.usage is not None) == expected


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
def test_replay_command_agrees(entry: dict[str, Any]) -> None:
    out = io.StringIO()
    status = replay(body(entry), ReplayOptions(random_seed=7), out)
    record = json.loads(out.getvalue().splitlines()[-1])
    assert record["state"] == entry["expected"]["state"]
    assert status == (0 if record["state"] == "completed" else 1)


def test_corpus_is_not_empty() -> None:
    assert len(ENTRIES) >= 50
