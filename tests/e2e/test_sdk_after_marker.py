"""The official SDKs, reading a body that broke after its end marker: those that read to the
end raise, and the record is not `completed`; openai-python's Chat iterator leaves at
`[DONE]` before the last chunk, sees no error, and the record raises no false alarm."""

from __future__ import annotations

import pytest

from tests.corpus import file as corpus
from tests.e2e.test_sdk_clients import anthropic, openai
from tests.e2e.test_sdk_truncation import assert_transport_error
from tests.integration.fake_upstream import Close, Script, Send, Sleep
from tests.streams import chat_chunk, sse

pytestmark = pytest.mark.e2e
SSE = {"Content-Type": "text/event-stream"}


def serve_then(upstream, body: bytes, *after: Close | Sleep) -> None:
    """Serve the whole `body`, end marker included, then `after` (a close without the
    chunked last-chunk, or a wait before it)."""
    fake, _ = upstream
    fake.script("*", Script([Send(body), *after], headers=SSE))


async def test_openai_responses_stream_raises_on_a_cut_after_response_completed(
    upstream, proxy_url, logs
) -> None:
    serve_then(upstream, corpus("openai-responses/text-basic.sse"), Close())
    client = openai.AsyncOpenAI(base_url=proxy_url + "/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(Exception) as raised:
        async with client.responses.stream(model="gpt-test", input="hi") as stream:
            await stream.get_final_response()
    await client.close()
    assert_transport_error(raised)
    [record] = await logs.wait()
    assert (record["state"], record["http_complete"], record["finish_reason"]) == (
        "interrupted",
        False,
        "completed",
    )
    assert record["anomalies"]["truncated_after_terminal"] == 1


async def test_anthropic_stream_raises_on_a_cut_after_message_stop(
    upstream, proxy_url, logs
) -> None:
    serve_then(upstream, corpus("anthropic-messages/text-basic-pings.sse"), Close())
    client = anthropic.AsyncAnthropic(base_url=proxy_url, api_key="k", max_retries=0)
    with pytest.raises(Exception) as raised:
        async with client.messages.stream(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            await stream.get_final_message()
    await client.close()
    assert_transport_error(raised)
    [record] = await logs.wait()
    assert (record["state"], record["http_complete"], record["finish_reason"]) == (
        "interrupted",
        False,
        "end_turn",
    )
    assert record["anomalies"]["truncated_after_terminal"] == 1


async def test_openai_chat_iterator_leaving_at_done_raises_no_false_alarm(
    upstream, proxy_url, logs
) -> None:
    usage = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    body = sse(chat_chunk("Hello"), chat_chunk(finish="stop"), usage, "[DONE]")
    serve_then(upstream, body, Sleep(2))  # the last chunk comes after the SDK has left
    client = openai.AsyncOpenAI(base_url=proxy_url + "/v1", api_key="sk-test", max_retries=0)
    stream = await client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    async for chunk in stream:  # returns at [DONE] without an error
        text += "".join(c.delta.content or "" for c in chunk.choices)
    await client.close()
    assert text == "Hello"
    [record] = await logs.wait()
    assert record["state"] == "completed"
    assert record["http_complete"] in (True, None)  # never false: the client saw no break
    assert record["usage"]["output_tokens"] == 2
    assert record["anomalies"] == {}
