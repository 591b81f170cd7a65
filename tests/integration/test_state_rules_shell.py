"""The state rules through the proxy, for the causes that are not about how the bytes ended:
a stream asked for and one JSON document answered, an event-stream chunk no client can decode,
and one event too deep for any JSON parser in the middle of a stream."""

from __future__ import annotations

import json

from sseproxy.core.eventstream import event
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse
from tests.unit.test_transport_truth import BEDROCK_INVOKE, CHAT

EVENTSTREAM = {"Content-Type": "application/vnd.amazon.eventstream"}


async def test_a_json_document_answering_a_stream_request_is_unconfirmed(
    upstream, make_proxy, logs
) -> None:
    """Every streaming helper raises on it (the anthropic SDK yields no events)."""
    fake, _ = upstream
    message = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"output_tokens": 1},
    }
    body = json.dumps(message).encode()
    fake.script("*", Script([Send(body)], headers={"Content-Type": "application/json"}))
    client = await make_proxy()
    response = await client.post("/v1/messages", json={"stream": True, "model": "c"})
    assert await response.read() == body
    record = (await logs.wait())[0]
    assert (record["state"], record["finish_reason"], record["anomalies"]) == (
        "unconfirmed",
        "end_turn",
        {"stream_not_honoured": 1},
    )


async def test_an_invoke_chunk_that_is_not_base64_is_unconfirmed(
    upstream, make_proxy, logs
) -> None:
    """botocore raises binascii.Error on that chunk."""
    fake, _ = upstream
    body = event("chunk", b'{"bytes":"not base64!"}') + BEDROCK_INVOKE.whole
    fake.script("*", Script([Send(body)], headers=EVENTSTREAM))
    client = await make_proxy()
    response = await client.post("/model/m/invoke-with-response-stream", json={})
    assert await response.read() == body
    record = (await logs.wait())[0]
    assert (record["dialect"], record["state"], record["anomalies"]) == (
        "bedrock-invoke",
        "unconfirmed",
        {"invalid_chunk_bytes": 1},
    )


async def test_one_event_too_deep_mid_stream_costs_that_event_only(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    deep = "[" * 100_000 + "]" * 100_000
    body = sse(chat_chunk("Hi"), deep) + CHAT.whole
    fake.script("*", Script([Send(body)], headers={"Content-Type": "text/event-stream"}))
    client = await make_proxy()
    response = await client.post("/v1/chat/completions", json={"stream": True})
    assert await response.read() == body
    record = (await logs.wait())[0]
    assert (record["state"], record["finish_reason"], record["events"]) == ("completed", "stop", 6)
    assert (record["anomalies"], record["text_chars"]) == ({"json_decode_error": 1}, 13)
