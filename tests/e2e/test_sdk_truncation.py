"""The official SDKs, reading a body whose HTTP framing never completed: each SDK raises, and
the record says `interrupted` with `http_complete: false` — never `completed`."""

from __future__ import annotations

import pytest

from tests.corpus import file as corpus
from tests.e2e.test_sdk_clients import (
    anthropic,
    gemini_text,
    openai_chat_text,
)
from tests.integration.fake_upstream import Close, Script, Send

pytestmark = pytest.mark.e2e


# What each SDK's HTTP stack raises for a body whose framing never completed (httpx, its
# httpx2 fork, aiohttp), possibly wrapped in the SDK's own connection error.
TRANSPORT_ERRORS = {"RemoteProtocolError", "APIConnectionError", "ClientPayloadError"}


def assert_transport_error(raised: pytest.ExceptionInfo[BaseException]) -> None:
    names = set()
    exc: BaseException | None = raised.value
    while exc is not None:
        names.update(cls.__name__ for cls in type(exc).__mro__)
        exc = exc.__cause__ or exc.__context__
    assert names & TRANSPORT_ERRORS, names


def serve_cut(upstream, body: bytes, cut_at: bytes) -> bytes:
    """Serve `body` up to and including the event that contains `cut_at`, then close the
    connection without the chunked last-chunk."""
    end = body.index(cut_at)
    end = (
        body.index(b"\n\n", end) + 2 if b"\n\n" in body[end:] else body.index(b"\r\n\r\n", end) + 4
    )
    fake, _ = upstream
    fake.script(
        "*", Script([Send(body[:end]), Close()], headers={"Content-Type": "text/event-stream"})
    )
    return body[:end]


async def test_openai_chat_cut_after_finish_reason(upstream, proxy_url, logs) -> None:
    """The failure every client saw and the record used to call `completed`."""
    serve_cut(upstream, corpus("openai-chat/basic-text-no-usage.sse"), b'"finish_reason":"stop"')
    with pytest.raises(Exception) as raised:
        await openai_chat_text(proxy_url + "/v1")
    assert_transport_error(raised)
    [record] = await logs.wait()
    assert (record["state"], record["http_complete"], record["finish_reason"]) == (
        "interrupted",
        False,
        "stop",
    )


async def test_anthropic_cut_before_message_stop(upstream, proxy_url, logs) -> None:
    serve_cut(upstream, corpus("anthropic-messages/text-basic-pings.sse"), b'"stop_reason"')
    client = anthropic.AsyncAnthropic(base_url=proxy_url, api_key="k", max_retries=0)
    with pytest.raises(Exception) as raised:
        async with client.messages.stream(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            await stream.get_final_message()
    await client.close()
    assert_transport_error(raised)
    [record] = await logs.wait()
    assert (record["state"], record["http_complete"]) == ("interrupted", False)
    assert record["interruption"]["reason"] == "upstream_closed"


async def test_gemini_cut_with_stop_on_every_chunk(upstream, proxy_url, logs) -> None:
    body = corpus("gemini/cjk-poem-stop-every-chunk.sse")
    second = body.index(b"data:", body.index(b"data:") + 1)
    sent = serve_cut(upstream, body, body[second : second + 20])
    with pytest.raises(Exception) as raised:
        await gemini_text(proxy_url)
    assert_transport_error(raised)
    [record] = await logs.wait()
    assert (record["state"], record["http_complete"], record["finish_reason"]) == (
        "interrupted",
        False,
        "STOP",
    )
    assert record["bytes"] == len(sent)
