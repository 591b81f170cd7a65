"""Bedrock ConverseStream and InvokeModelWithResponseStream: every state each can reach, through
the tap's AWS event stream framing (whole and byte by byte)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions
from sseproxy.core.events import Framing
from sseproxy.core.eventstream import encode_message, event, exception
from sseproxy.core.inject import Close, Injector, Write, parse_rules
from tests.streams import random_split, verdict_of

CONV, INV = Dialect.BEDROCK_CONVERSE, Dialect.BEDROCK_INVOKE


def ev(name: str, **payload: Any) -> bytes:
    return event(name, json.dumps({**payload, "p": "abcdefgh"}).encode())


def text_stream(*texts: str, stop: str | None = "end_turn", metadata: bool = True) -> bytes:
    out = [ev("messageStart", role="assistant")]
    out += [ev("contentBlockDelta", contentBlockIndex=0, delta={"text": t}) for t in texts]
    out.append(ev("contentBlockStop", contentBlockIndex=0))
    if stop is not None:
        out.append(ev("messageStop", stopReason=stop))
    if metadata:
        usage = {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8}
        out.append(ev("metadata", usage=usage, metrics={"latencyMs": 100}))
    return b"".join(out)


class TestConverse:
    def test_completed(self) -> None:
        v = verdict_of(text_stream("Hel", "lo"), CONV)
        assert (v.state, v.finish_reason, v.finish_category, v.text_chars) == (
            "completed",
            "end_turn",
            "stop",
            5,
        )
        assert v.usage is not None and (v.usage.input_tokens, v.usage.output_tokens) == (5, 3)
        assert v.events == 6 and v.last_event == "metadata" and v.anomalies == {}

    def test_tool_use(self) -> None:
        data = b"".join(
            [
                ev("messageStart", role="assistant"),
                ev(
                    "contentBlockStart",
                    contentBlockIndex=0,
                    start={"toolUse": {"toolUseId": "t1", "name": "get_weather"}},
                ),
                ev("contentBlockDelta", contentBlockIndex=0, delta={"toolUse": {"input": '{"ci'}}),
                ev(
                    "contentBlockDelta", contentBlockIndex=0, delta={"toolUse": {"input": 'ty":1}'}}
                ),
                ev("contentBlockStop", contentBlockIndex=0),
                ev("messageStop", stopReason="tool_use"),
                ev("metadata", usage={"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}),
            ]
        )
        v = verdict_of(data, CONV)
        assert (v.state, v.finish_category) == ("completed", "tool_use")
        assert [(c.id, c.name, c.arguments_valid_json) for c in v.tool_calls] == [
            ("t1", "get_weather", True)
        ]

    def test_reasoning_is_counted_apart(self) -> None:
        data = ev(
            "contentBlockDelta",
            contentBlockIndex=0,
            delta={"reasoningContent": {"text": "hmm"}},
        ) + text_stream("ok")
        v = verdict_of(data, CONV)
        assert (v.reasoning_chars, v.text_chars, v.state) == (3, 2, "completed")

    def test_max_tokens_is_incomplete(self) -> None:
        v = verdict_of(text_stream("a", stop="max_tokens"), CONV)
        assert (v.state, v.finish_category) == ("incomplete", "length")

    def test_guardrail_is_incomplete_content_filter(self) -> None:
        for reason in ("guardrail_intervened", "content_filtered"):
            v = verdict_of(text_stream("a", stop=reason), CONV)
            assert (v.state, v.finish_reason, v.finish_category) == (
                "incomplete",
                reason,
                "content_filter",
            )

    def test_unknown_stop_reason_is_never_success(self) -> None:
        v = verdict_of(text_stream("a", stop="brand_new"), CONV)
        assert (v.state, v.finish_category) == ("incomplete", "other")
        assert v.anomalies == {"unknown_finish_reason": 1}

    def test_exception_message_is_failed(self) -> None:
        body = {"message": "Model stream error", "originalStatusCode": 500}
        data = text_stream("par", stop=None, metadata=False) + exception(
            "modelStreamErrorException", json.dumps(body).encode()
        )
        v = verdict_of(data, CONV)
        assert (v.state, v.finish_category, v.last_event) == (
            "failed",
            "error",
            "modelStreamErrorException",
        )
        assert v.error is not None
        assert (v.error.type, v.error.code, v.error.message) == (
            "modelStreamErrorException",
            "500",
            "Model stream error",
        )

    def test_unmodelled_error_message_is_failed(self) -> None:
        error = encode_message(
            {":message-type": "error", ":error-code": "InternalFailure", ":error-message": "boom"},
            b"",
        )
        v = verdict_of(text_stream("a", stop=None, metadata=False) + error, CONV)
        assert v.state == "failed" and v.error is not None
        assert (v.error.type, v.error.message) == ("InternalFailure", "boom")

    def test_no_message_stop_is_interrupted(self) -> None:
        v = verdict_of(text_stream("Hel", stop=None, metadata=False), CONV)
        assert (v.state, v.text_chars) == ("interrupted", 3)

    def test_cut_mid_message_is_interrupted_with_partial_bytes(self) -> None:
        data = text_stream("Hello", stop=None, metadata=False) + ev("messageStop", stopReason="x")
        v = verdict_of(data[:-10], CONV, end=EndReason.UPSTREAM_CLOSED)
        assert v.state == "interrupted"
        assert v.interruption is not None and v.interruption.partial_event_bytes > 0

    def test_message_stop_without_stop_reason_is_unconfirmed(self) -> None:
        data = text_stream("a", stop=None, metadata=False) + ev("messageStop")
        assert verdict_of(data, CONV).state == "unconfirmed"

    def test_missing_metadata_is_counted_not_fatal(self) -> None:
        v = verdict_of(text_stream("a", metadata=False), CONV)
        assert (v.state, v.anomalies, v.usage) == ("completed", {"metadata_missing": 1}, None)

    def test_events_after_metadata_are_anomalies_not_content(self) -> None:
        data = text_stream("a") + ev("contentBlockDelta", contentBlockIndex=0, delta={"text": "zz"})
        v = verdict_of(data, CONV)
        assert (v.state, v.text_chars, v.anomalies) == (
            "completed",
            1,
            {"events_after_terminal": 1},
        )

    def test_unknown_delta_and_event_are_counted(self) -> None:
        data = (
            ev("contentBlockDelta", contentBlockIndex=0, delta={"hologram": {}})
            + ev("somethingNew")
            + text_stream("a")
        )
        v = verdict_of(data, CONV)
        assert v.state == "completed"
        assert v.anomalies == {"unknown_delta_type": 1, "unknown_event_type": 1}

    def test_bad_crc_goes_blind_unconfirmed(self) -> None:
        data = bytearray(text_stream("Hello"))
        data[len(data) // 2] ^= 0x01
        v = verdict_of(bytes(data), CONV)
        assert v.state == "unconfirmed"
        assert (
            v.anomalies.get("eventstream_message_crc_mismatch", 0)
            + v.anomalies.get("eventstream_prelude_crc_mismatch", 0)
            + v.anomalies.get("eventstream_malformed_headers", 0)
            == 1
        )

    def test_json_error_body_is_read_as_json(self) -> None:
        body = json.dumps({"message": "The security token included in the request is invalid."})
        v = verdict_of(body.encode(), CONV)
        assert v.state == "failed" and v.error is not None
        assert v.error.message == "The security token included in the request is invalid."

    def test_non_streamed_converse_body(self) -> None:
        body = {
            "output": {"message": {"role": "assistant", "content": [{"text": "Hi there"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 2, "outputTokens": 2, "totalTokens": 4},
        }
        v = verdict_of(json.dumps(body).encode(), CONV)
        assert (v.state, v.text_chars) == ("completed", 8)

    def test_sniffed_from_the_content_type_and_first_message(self) -> None:
        tap = StreamTap(None, content_type="application/vnd.amazon.eventstream")
        tap.feed(text_stream("Hi"))
        v = tap.close()
        assert (v.dialect, v.state, v.text_chars) == ("bedrock-converse", "completed", 2)


def chunk(obj: dict[str, Any]) -> bytes:
    data = base64.b64encode(json.dumps(obj).encode()).decode()
    return event("chunk", json.dumps({"bytes": data, "p": "abc"}).encode())


METRICS = {
    "amazon-bedrock-invocationMetrics": {
        "inputTokenCount": 10,
        "outputTokenCount": 4,
        "invocationLatency": 500,
        "firstByteLatency": 100,
    }
}


def anthropic_chunks(
    *texts: str, stop: str | None = "end_turn", message_stop: bool = True
) -> bytes:
    out = [
        chunk(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "model": "claude",
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            }
        ),
        chunk(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
    ]
    out += [
        chunk(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
        )
        for t in texts
    ]
    out.append(chunk({"type": "content_block_stop", "index": 0}))
    if stop is not None:
        out.append(
            chunk(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop},
                    "usage": {"output_tokens": 4},
                }
            )
        )
    if message_stop:
        out.append(chunk({"type": "message_stop", **METRICS}))
    return b"".join(out)


class TestInvokeAnthropic:
    def test_completed_with_the_anthropic_rules(self) -> None:
        v = verdict_of(anthropic_chunks("Hel", "lo"), INV)
        assert (v.dialect, v.state, v.finish_reason, v.text_chars) == (
            "bedrock-invoke",
            "completed",
            "end_turn",
            5,
        )
        assert (v.response_id, v.model, v.last_event) == ("msg_1", "claude", "message_stop")
        assert v.usage is not None and v.usage.output_tokens == 4
        assert v.anomalies == {}

    def test_no_message_stop_is_interrupted(self) -> None:
        v = verdict_of(anthropic_chunks("Hel", message_stop=False), INV)
        assert (v.state, v.finish_reason) == ("interrupted", "end_turn")
        assert v.anomalies == {"stop_reason_without_message_stop": 1}

    def test_max_tokens_is_incomplete(self) -> None:
        v = verdict_of(anthropic_chunks("a", stop="max_tokens"), INV)
        assert (v.state, v.finish_category) == ("incomplete", "length")

    def test_message_stop_without_stop_reason_is_unconfirmed(self) -> None:
        assert verdict_of(anthropic_chunks("a", stop=None), INV).state == "unconfirmed"

    def test_exception_is_failed(self) -> None:
        data = anthropic_chunks("a", stop=None, message_stop=False) + exception(
            "throttlingException", b'{"message":"Too many requests"}'
        )
        v = verdict_of(data, INV)
        assert v.state == "failed" and v.error is not None
        assert (v.error.type, v.error.message) == ("throttlingException", "Too many requests")

    def test_anthropic_error_event_inside_a_chunk_is_failed(self) -> None:
        data = anthropic_chunks("a", stop=None, message_stop=False) + chunk(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
        v = verdict_of(data, INV)
        assert v.state == "failed" and v.error is not None and v.error.type == "overloaded_error"

    def test_bad_base64_is_unconfirmed(self) -> None:
        """botocore raises binascii.Error on that chunk: the rest cannot confirm an answer."""
        bad = event("chunk", b'{"bytes":"not base64!"}')
        v = verdict_of(bad + anthropic_chunks("a"), INV)
        assert v.state == "unconfirmed" and v.anomalies == {"invalid_chunk_bytes": 1}
        assert verdict_of(anthropic_chunks("a"), INV).state == "completed"


def llama(text: str, stop: str | None = None, metrics: bool = False) -> bytes:
    obj: dict[str, Any] = {"generation": text, "stop_reason": stop}
    if metrics:
        obj.update(METRICS)
    return chunk(obj)


class TestInvokeGeneric:
    def test_llama_completed(self) -> None:
        data = llama("Hel") + llama("lo") + llama("", "stop", metrics=True)
        v = verdict_of(data, INV)
        assert (v.state, v.finish_reason, v.finish_category, v.text_chars) == (
            "completed",
            "stop",
            "stop",
            5,
        )
        assert v.usage is not None and (v.usage.input_tokens, v.usage.output_tokens) == (10, 4)

    def test_llama_length_is_incomplete(self) -> None:
        v = verdict_of(llama("a") + llama("", "length", metrics=True), INV)
        assert (v.state, v.finish_category) == ("incomplete", "length")

    def test_titan_and_mistral_shapes(self) -> None:
        titan = chunk({"outputText": "Hi", "completionReason": "FINISH", **METRICS})
        v = verdict_of(titan, INV)
        assert (v.state, v.finish_reason, v.text_chars) == ("completed", "FINISH", 2)
        mistral = chunk({"outputs": [{"text": "Hey", "stop_reason": "stop"}], **METRICS})
        v = verdict_of(mistral, INV)
        assert (v.state, v.text_chars) == ("completed", 3)

    def test_no_stop_reason_no_metrics_is_interrupted(self) -> None:
        assert verdict_of(llama("a") + llama("b"), INV).state == "interrupted"

    def test_metrics_without_stop_reason_is_unconfirmed(self) -> None:
        assert verdict_of(llama("a") + llama("", None, metrics=True), INV).state == "unconfirmed"

    def test_stop_reason_without_metrics_is_counted(self) -> None:
        v = verdict_of(llama("a") + llama("", "stop"), INV)
        assert (v.state, v.anomalies) == ("completed", {"invocation_metrics_missing": 1})

    def test_exception_is_failed(self) -> None:
        data = llama("a") + exception("modelTimeoutException", b'{"message":"timed out"}')
        v = verdict_of(data, INV)
        assert v.state == "failed" and v.error is not None
        assert v.error.type == "modelTimeoutException"


@given(st.integers(min_value=0), st.integers(min_value=1, max_value=50), st.sampled_from([1, 2]))
def test_any_chunking_gives_the_same_verdict(seed: int, largest: int, which: int) -> None:
    data, dialect = (
        (text_stream("Hé", "llo 🌍"), CONV) if which == 1 else (anthropic_chunks("Hé", "🌍"), INV)
    )
    whole = StreamTap(dialect, options=TapOptions(strict=True))
    whole.feed(data)
    expected = whole.close()
    split = StreamTap(dialect, options=TapOptions(strict=True))
    for piece in random_split(data, seed, largest):
        split.feed(piece)
        assert split.retained_bytes <= len(data)
    assert split.close() == expected
    assert expected.state == "completed"


def test_an_event_stream_is_recognised_from_its_first_bytes() -> None:
    """No content type, no dialect (a raw body replayed): a prelude whose CRC holds decides."""
    v = verdict_of(anthropic_chunks("Hi"), None)
    assert (v.dialect, v.state, v.text_chars) == ("bedrock-invoke", "completed", 2)
    v = verdict_of(text_stream("Hey"), None)
    assert (v.dialect, v.state, v.text_chars) == ("bedrock-converse", "completed", 3)


def test_a_nul_byte_without_a_valid_prelude_is_not_an_event_stream() -> None:
    v = verdict_of(b"\x00" * 20 + b"\n\ndata: x\n\n", None)
    assert v.dialect == "sse"


def drill(rules: str, data: bytes, dialect: Dialect) -> tuple[bytes, bool]:
    """The bytes a client receives under `rules`, fed 7 bytes at a time; whether it was cut."""
    injector = Injector(parse_rules(rules), dialect)
    steps = []
    for i in range(0, len(data), 7):
        steps += injector.feed(data[i : i + 7])
    steps += injector.finish()
    return b"".join(s.data for s in steps if isinstance(s, Write)), any(
        isinstance(s, Close) for s in steps
    )


DRILL_STREAMS = [
    (CONV, text_stream("Hello", "world")),
    (INV, anthropic_chunks("Hello", "world")),
    (INV, llama("Hello") + llama("", "stop", metrics=True)),
]


def test_drop_terminal_converse_is_interrupted() -> None:
    out, _ = drill("drop-terminal", text_stream("Hello"), CONV)
    assert verdict_of(out, CONV).state == "interrupted"


def test_drop_terminal_invoke_generic_is_interrupted() -> None:
    # Llama's last chunk holds both the stop reason and the metrics: dropping it leaves text
    # with neither, which is interrupted.
    out, _ = drill("drop-terminal", llama("Hello") + llama("", "stop", metrics=True), INV)
    assert verdict_of(out, INV).state == "interrupted"


def test_drop_terminal_invoke_anthropic_is_interrupted() -> None:
    out, _ = drill("drop-terminal", anthropic_chunks("Hello"), INV)
    v = verdict_of(out, INV)
    assert (v.state, v.anomalies) == ("interrupted", {"stop_reason_without_message_stop": 1})


@pytest.mark.parametrize(("dialect", "data"), DRILL_STREAMS)
def test_inject_error_is_failed_with_the_injected_exception(dialect: Dialect, data: bytes) -> None:
    out, cut = drill("inject-error=2", data, dialect)
    v = verdict_of(out, dialect)
    assert not cut and v.state == "failed" and v.error is not None
    assert (v.error.type, v.error.message) == (
        "modelStreamErrorException",
        "Model stream error (injected)",
    )
    assert v.events == 3


@pytest.mark.parametrize(("dialect", "data"), DRILL_STREAMS)
def test_cut_mid_event_is_interrupted_with_a_partial_message(dialect: Dialect, data: bytes) -> None:
    out, cut = drill("cut-mid-event=2", data, dialect)
    v = verdict_of(out, dialect, end=EndReason.UPSTREAM_CLOSED)
    assert cut and v.state == "interrupted"
    assert v.interruption is not None and v.interruption.partial_event_bytes > 0


@pytest.mark.parametrize(("dialect", "data"), DRILL_STREAMS)
def test_rechunk_and_crlf_leave_binary_messages_intact(dialect: Dialect, data: bytes) -> None:
    out, _ = drill("rechunk=1,crlf,split-utf8", data, dialect)
    assert out == data


def test_done_after_cut_on_converse_is_unconfirmed() -> None:
    out, _ = drill("done-after-cut=2", text_stream("Hello"), CONV)
    assert verdict_of(out, CONV).state == "unconfirmed"


class TestTransport:
    """The HTTP framing is evidence: the end markers are messageStop, the invocation metrics
    chunk, and (for Claude payloads) message_stop."""

    def test_truncated_before_message_stop_is_interrupted(self) -> None:
        v = verdict_of(text_stream("a", stop=None, metadata=False), CONV, http_complete=False)
        assert (v.state, v.http_complete) == ("interrupted", False)

    def test_truncated_after_message_stop_is_interrupted_with_its_stop_reason(self) -> None:
        """boto3 raises (urllib3 ProtocolError) on the cut after `messageStop`."""
        v = verdict_of(text_stream("a", metadata=False), CONV, http_complete=False)
        assert (v.state, v.anomalies) == ("interrupted", {"truncated_after_terminal": 1})
        assert (v.finish_reason, v.finish_category) == ("end_turn", "stop")

    def test_declared_content_type_decides_the_framing(self) -> None:
        v = verdict_of(text_stream("abc"), None, content_type="application/vnd.amazon.eventstream")
        assert (v.dialect, v.state, v.text_chars) == ("bedrock-converse", "completed", 3)

    def test_invoke_generic_stop_reason_in_a_truncated_body_is_interrupted(self) -> None:
        v = verdict_of(llama("a") + llama("", "stop"), INV, http_complete=False)
        assert (v.state, v.anomalies) == ("interrupted", {})

    def test_invoke_anthropic_truncated_after_message_stop_is_interrupted(self) -> None:
        v = verdict_of(anthropic_chunks("a"), INV, http_complete=False)
        assert (v.state, v.anomalies) == ("interrupted", {"truncated_after_terminal": 1})
        assert v.finish_reason == "end_turn"

    def test_client_leaving_after_message_stop_keeps_the_outcome(self) -> None:
        v = verdict_of(
            text_stream("a", metadata=False),
            CONV,
            EndReason.CLIENT_DISCONNECTED,
            http_complete=False,
        )
        assert v.state == "completed"


def test_mock_serves_a_raw_event_stream_file_message_by_message(tmp_path) -> None:
    from sseproxy.tools.mock import from_body

    data = text_stream("Hi")
    path = tmp_path / "converse.eventstream"
    path.write_bytes(data)
    recording = from_body(path)
    assert recording.dialect == "bedrock-converse"
    assert recording.headers == {"Content-Type": "application/vnd.amazon.eventstream"}
    assert [chunk for chunk, _ in recording.chunks] == [
        ev("messageStart", role="assistant"),
        ev("contentBlockDelta", contentBlockIndex=0, delta={"text": "Hi"}),
        ev("contentBlockStop", contentBlockIndex=0),
        ev("messageStop", stopReason="end_turn"),
        ev(
            "metadata",
            usage={"inputTokens": 5, "outputTokens": 3, "totalTokens": 8},
            metrics={"latencyMs": 100},
        ),
    ]


@given(st.binary(max_size=200), st.integers(min_value=0), st.integers(min_value=1, max_value=30))
def test_drill_splitter_keeps_every_byte(junk: bytes, seed: int, largest: int) -> None:
    from sseproxy.core.inject import RawMessages

    data = text_stream("a") + junk
    splitter = RawMessages()
    out = []
    for piece in random_split(data, seed, largest):
        out += splitter.feed(piece)
    assert b"".join(out) + splitter.rest() == data


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
event_names = st.sampled_from(
    [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "chunk",
        "other",
    ]
)
member_names = st.sampled_from(
    [
        "contentBlockIndex",
        "delta",
        "start",
        "stopReason",
        "usage",
        "bytes",
        "text",
        "toolUse",
        "type",
        "index",
    ]
)


def random_payload(draw: Any) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=30))
    obj = draw(st.dictionaries(member_names, json_values, max_size=4))
    if kind == 2:  # an Invoke chunk wrapping arbitrary JSON
        inner = json.dumps(
            draw(
                st.dictionaries(
                    st.sampled_from(["type", "delta", "index", "stop_reason", "generation"]),
                    json_values,
                    max_size=4,
                )
            )
        )
        obj = {"bytes": base64.b64encode(inner.encode()).decode()}
    return json.dumps(obj).encode()


@st.composite
def random_messages(draw: Any) -> bytes:
    out = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.integers(0, 9)) == 0:
            out.append(exception(draw(st.text(max_size=10)), random_payload(draw)))
        else:
            out.append(event(draw(event_names), random_payload(draw)))
    return b"".join(out)


@given(
    random_messages(),
    st.sampled_from([CONV, INV, None]),
    st.booleans(),
    st.integers(min_value=0),
    st.integers(min_value=1, max_value=40),
)
def test_arbitrary_messages_give_one_verdict_whatever_the_chunking(
    data: bytes, dialect: Dialect | None, complete: bool, seed: int, largest: int
) -> None:
    """Strict taps re-raise any internal error, so none may come from what a peer sends; and
    the verdict depends on the bytes, not on how they were cut."""

    def tap() -> StreamTap:
        ctype = "application/vnd.amazon.eventstream"
        return StreamTap(dialect, content_type=ctype, options=TapOptions(strict=True))

    whole = tap()
    whole.feed(data)
    split = tap()
    for piece in random_split(data, seed, largest):
        split.feed(piece)
    assert split.close(http_complete=complete) == whole.close(http_complete=complete)


def test_a_declared_event_stream_is_split_by_messages_even_for_an_unknown_dialect() -> None:
    """`--upstream` with a path no route names: the Content-Type still says event stream, and
    cutting it as text lines would break the binary framing."""
    data = text_stream("Hello", "world")
    unknown = Injector(parse_rules("cut-after=2"), None, framing=Framing.EVENTSTREAM)
    steps = [*unknown.feed(data), *unknown.finish()]
    written = b"".join(s.data for s in steps if isinstance(s, Write))
    known, _ = drill("cut-after=2", data, CONV)
    assert written == known
    assert 0 < len(written) < len(data)
