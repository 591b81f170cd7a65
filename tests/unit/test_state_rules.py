"""The state rules that keep the record agreeing with every client (docs/STATE-RULES.md): a cut
body is `interrupted` also after the end marker; a client that leaves first raises no alarm
about bytes it did not wait for; what the analysis cannot decode confirms nothing; one event no
JSON parser takes costs that event only. Every example is also fed one byte at a time."""

from __future__ import annotations

import base64
import gzip

import pytest

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions, Verdict
from sseproxy.core.eventstream import event
from sseproxy.core.request import request_facts
from tests.streams import chat_chunk, sse, verdict_of
from tests.unit.test_transport_truth import (
    ANTHROPIC,
    BEDROCK_CONVERSE,
    BEDROCK_INVOKE,
    CHAT,
    COHERE,
    GEMINI,
    OLLAMA,
    RESPONSES,
    VERCEL,
    WITH_MARKER,
    Case,
)

CUT = EndReason.UPSTREAM_CLOSED
LEFT = EndReason.CLIENT_DISCONNECTED
USAGE = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}


def ids(case: Case) -> str:
    return str(case.dialect)


# -- a cut after the end marker ---------------------------------------------------------------


def test_a_cut_after_a_cut_short_outcome_is_interrupted_with_its_reason() -> None:
    data = sse(chat_chunk("Hi"), chat_chunk(finish="length"), "[DONE]")
    assert verdict_of(data, Dialect.OPENAI_CHAT).state == "incomplete"
    v = verdict_of(data, Dialect.OPENAI_CHAT, CUT, http_complete=False)
    assert (v.state, v.finish_reason, v.finish_category) == ("interrupted", "length", "length")
    assert v.anomalies == {"truncated_after_terminal": 1}


def test_an_in_band_error_then_a_cut_stays_failed() -> None:
    """The client raised the provider's error before it saw the break."""
    data = sse({"error": {"message": "overloaded", "type": "server_error"}}, "[DONE]")
    v = verdict_of(data, Dialect.OPENAI_CHAT, CUT, http_complete=False)
    assert v.state == "failed" and v.error is not None and v.error.message == "overloaded"


@pytest.mark.parametrize("case", WITH_MARKER, ids=ids)
def test_the_cut_after_the_marker_reads_the_same_in_the_record(case: Case) -> None:
    record = verdict_of(case.whole, case.dialect, CUT, http_complete=False).to_dict()
    assert (record["state"], record["http_complete"], record["interruption"]) == (
        "interrupted",
        False,
        {"reason": "upstream_closed", "partial_event_bytes": 0},
    )


# -- the client leaves first ------------------------------------------------------------------


@pytest.mark.parametrize("case", WITH_MARKER, ids=ids)
def test_a_client_that_left_before_the_framing_ended_leaves_http_complete_unknown(
    case: Case,
) -> None:
    """openai-python's Chat iterator closes at `[DONE]`, before the last chunk."""
    v = verdict_of(case.whole, case.dialect, LEFT, http_complete=None)
    assert (v.state, v.http_complete, v.interruption, dict(v.anomalies)) == (
        case.outcome,
        None,
        None,
        {},
    )
    assert v.to_dict()["http_complete"] is None


def test_usage_missing_only_when_the_rest_of_the_body_was_seen() -> None:
    asked = request_facts(
        "/v1/chat/completions", "", b'{"stream":true,"stream_options":{"include_usage":true}}'
    )
    no_usage = CHAT.whole
    left = verdict_of(no_usage, Dialect.OPENAI_CHAT, LEFT, http_complete=None, request=asked)
    assert (left.state, "usage_missing" in left.anomalies) == ("completed", False)
    seen = verdict_of(no_usage, Dialect.OPENAI_CHAT, LEFT, http_complete=True, request=asked)
    assert seen.anomalies.get("usage_missing") == 1  # the proxy read it all: none was sent
    clean = verdict_of(no_usage, Dialect.OPENAI_CHAT, request=asked)
    assert clean.anomalies.get("usage_missing") == 1
    with_usage = CHAT.decided + sse(USAGE, "[DONE]")
    assert (
        "usage_missing" not in verdict_of(with_usage, Dialect.OPENAI_CHAT, request=asked).anomalies
    )


def test_missing_done_is_not_counted_when_the_client_left_before_it() -> None:
    v = verdict_of(CHAT.decided, Dialect.OPENAI_CHAT, LEFT, http_complete=None)
    assert (v.state, "missing_done" in v.anomalies) == ("completed", False)


def gzip_verdict(data: bytes, end: EndReason, http_complete: bool | None) -> Verdict:
    """As `verdict_of`, for a gzip body: whole, then one byte at a time, the same verdict."""

    def run(chunks: list[bytes]) -> Verdict:
        tap = StreamTap(
            Dialect.OPENAI_CHAT, content_encoding="gzip", options=TapOptions(strict=True)
        )
        for chunk in chunks:
            tap.feed(chunk)
        return tap.close(end, http_complete=http_complete)

    whole = run([data])
    assert run([data[i : i + 1] for i in range(len(data))]) == whole
    return whole


def test_truncated_compressed_body_only_when_the_client_waited_for_the_trailer() -> None:
    """A whole gzip stream whose trailer the client did not wait for is no finding."""
    no_trailer = gzip.compress(CHAT.whole)[:-8]
    left = gzip_verdict(no_trailer, LEFT, None)
    assert (left.state, "truncated_compressed_body" in left.anomalies) == ("completed", False)
    cut = gzip_verdict(no_trailer, CUT, False)
    assert (cut.state, cut.anomalies.get("truncated_compressed_body")) == ("interrupted", 1)


# -- what confirms nothing --------------------------------------------------------------------

ANTHROPIC_BODY = (
    b'{"id":"m","type":"message","role":"assistant","model":"c","content":'
    b'[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"output_tokens":1}}'
)


def test_stream_not_honoured_is_unconfirmed() -> None:
    """Every streaming helper raises on one JSON document where it asked for a stream."""
    asked = request_facts("/v1/messages", "", b'{"stream":true}')
    v = verdict_of(ANTHROPIC_BODY, Dialect.ANTHROPIC_MESSAGES, request=asked)
    assert (v.state, v.finish_reason, v.anomalies.get("stream_not_honoured")) == (
        "unconfirmed",
        "end_turn",
        1,
    )
    plain = request_facts("/v1/messages", "", b"{}")
    assert verdict_of(ANTHROPIC_BODY, Dialect.ANTHROPIC_MESSAGES, request=plain).state == (
        "completed"
    )


def test_an_event_stream_chunk_that_is_not_base64_is_unconfirmed_also_after_message_stop() -> None:
    bad = event("chunk", b'{"bytes":"not base64!"}')
    v = verdict_of(BEDROCK_INVOKE.whole + bad, Dialect.BEDROCK_INVOKE)
    assert (v.state, v.anomalies.get("invalid_chunk_bytes")) == ("unconfirmed", 1)


# -- one event no parser takes ----------------------------------------------------------------


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def first_event_end(case: Case) -> int:
    data = case.decided
    if data[:1] == b"\x00":  # an AWS event stream: the first message, by its length
        return int.from_bytes(data[:4], "big")
    if case is OLLAMA:
        return data.index(b"\n") + 1
    return data.index(b"\n\n") + 2


def deep_event(case: Case, depth: int) -> bytes:
    """An event of the dialect's usual kind whose JSON is `depth` arrays deep."""
    text = deep(depth)
    if case is OLLAMA:
        return text.encode() + b"\n"
    if case is BEDROCK_CONVERSE:
        return event("contentBlockDelta", text.encode())
    if case is BEDROCK_INVOKE:
        return event("chunk", b'{"bytes":"%s"}' % base64.b64encode(text.encode()))
    names = {
        ANTHROPIC: "content_block_delta",
        RESPONSES: "response.output_text.delta",
        COHERE: "content-delta",
    }
    return sse((names[case], text)) if case in names else sse(text)


DEEP_CASES = [CHAT, RESPONSES, ANTHROPIC, GEMINI, VERCEL, OLLAMA, BEDROCK_CONVERSE]
DEEP_CASES += [BEDROCK_INVOKE, COHERE]
EVENTSTREAM_CASES = (BEDROCK_CONVERSE, BEDROCK_INVOKE)


@pytest.mark.parametrize("depth", [2000, 100_000])
@pytest.mark.parametrize("case", DEEP_CASES, ids=ids)
def test_one_event_too_deep_to_decode_costs_that_event_only(case: Case, depth: int) -> None:
    """orjson stops at 1024 levels and `json` at the recursion limit: the event counts as
    undecodable and the analysis goes on to the stream's normal end."""
    at = first_event_end(case)
    data = case.whole[:at] + deep_event(case, depth) + case.whole[at:]
    whole = verdict_of(case.whole, case.dialect)
    v = verdict_of(data, case.dialect)
    # On an event stream the client's decoder raises on it (botocore decodes Converse payloads,
    # apps json.loads Invoke's bytes): nothing then confirms the answer. The SSE and NDJSON
    # dialects go on as for any other undecodable event.
    expected = "unconfirmed" if case in EVENTSTREAM_CASES else case.outcome
    assert (v.state, v.finish_reason, v.events) == (expected, case.finish, whole.events + 1)
    assert v.anomalies.get("json_decode_error") == 1
    assert "core_error" not in v.anomalies


def test_tool_arguments_too_deep_to_validate_are_not_valid_json() -> None:
    call = {"index": 0, "id": "t", "function": {"name": "f", "arguments": deep(5000)}}
    data = sse(
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
        chat_chunk(finish="tool_calls"),
        "[DONE]",
    )
    v = verdict_of(data, Dialect.OPENAI_CHAT)
    assert (v.state, [t.arguments_valid_json for t in v.tool_calls]) == ("completed", [False])
    assert "core_error" not in v.anomalies
