"""The inspector's event list, rebuilt from recorded bodies (tests/corpus): each row's size is
its bytes on the wire (every byte of a whole body in exactly one row), and its gist is what
that event says that the others do not (the delta text, the finish), not the JSON prefix every
event repeats."""

from __future__ import annotations

import gzip

import orjson

from sseproxy.inspector.event_list import EventList
from sseproxy.observe.redact import NO_SECRETS
from tests.corpus import file

CHAT = "openai-chat/basic-text-no-usage.sse"  # recorded from api.openai.com (gpt-5-nano)
ANTHROPIC = "anthropic-messages/text-basic-pings.sse"  # recorded from api.anthropic.com


def rows(body: bytes, dialect: str, **kwargs) -> list[dict]:
    built = EventList(500, 200, NO_SECRETS).build(
        [(0.0, body)],
        dialect,
        kwargs.get("content_type", "text/event-stream"),
        kwargs.get("encoding"),
        kwargs.get("whole", True),
    )
    return built["events"]


def test_each_event_row_is_its_bytes_on_the_wire() -> None:
    body = file(CHAT)
    listed = rows(body, "openai_chat")
    blocks = [b + b"\n\n" for b in body.split(b"\n\n") if b]
    assert [r["size"] for r in listed] == [len(b) for b in blocks]
    assert sum(r["size"] for r in listed) == len(body)


def test_a_compressed_body_rows_are_their_decoded_bytes() -> None:
    body = file(ANTHROPIC)
    listed = rows(gzip.compress(body), "anthropic_messages", encoding="gzip")
    assert sum(r["size"] for r in listed) == len(body)
    assert listed[0]["size"] == body.index(b"\n\n") + 2


def test_a_json_body_is_its_length_on_the_wire_not_pretty_printed() -> None:
    # a Chat Completions error body as api.openai.com sends it, compact
    body = b'{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}'
    [row] = rows(body, "openai_chat", content_type="application/json")
    assert row["kind"] == "body"
    assert row["size"] == len(body)
    assert row["data"] != body.decode()  # shown pretty-printed; counted as it came
    assert row["gist"] == "error: Incorrect API key provided"


def test_a_cut_stream_last_row_stops_where_the_discarded_tail_begins() -> None:
    body = file(CHAT)
    first_two = body.index(b"\n\n", body.index(b"\n\n") + 2) + 2
    tail = b'data: {"id":"chatcmpl-x","cho'
    listed = rows(body[:first_two] + tail, "openai_chat", whole=False)
    assert len(listed) == 2
    assert sum(r["size"] for r in listed) == first_two


def test_chat_rows_show_the_delta_not_the_common_prefix() -> None:
    listed = rows(file(CHAT), "openai_chat")
    gists = [r["gist"] for r in listed]
    assert gists[:4] == ["role: assistant", '"Hi"', '" there"', '"!"']
    assert not any(g.startswith('{"id":"chatcmpl-') for g in gists)
    # the text of the deltas, joined, is the answer the record's content has
    texts = [orjson.loads(g) for g in gists if g.startswith('"')]
    assert "".join(texts).startswith("Hi there! How can I help today?")


def test_anthropic_rows_show_the_text_delta_and_the_stop_reason() -> None:
    listed = rows(file(ANTHROPIC), "anthropic_messages")
    by_type = [(r["type"], r["gist"]) for r in listed]
    assert ("content_block_delta", '"4200 + 42 ="') in by_type
    assert ("content_block_delta", '" 4242"') in by_type
    assert ("message_delta", "stop_reason: end_turn") in by_type
    assert ("message_start", "role: assistant") in by_type
