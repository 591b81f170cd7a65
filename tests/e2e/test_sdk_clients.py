"""The official SDKs, pointed at the proxy with the default routes, in front of a fake upstream
replaying recorded streams: what the SDK assembles must equal the direct result and agree
with the record."""

from __future__ import annotations

import pytest

from tests.corpus import file as corpus
from tests.integration.fake_upstream import Script, Send
from tests.streams import sse

pytestmark = pytest.mark.e2e
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
genai = pytest.importorskip("google.genai")


def serve(upstream, body: bytes, status: int = 200, ctype: str = "text/event-stream") -> None:
    fake, _ = upstream
    chunks = [body[i : i + 37] for i in range(0, len(body), 37)]
    fake.script(
        "*", Script([Send(c) for c in chunks], status=status, headers={"Content-Type": ctype})
    )


async def openai_chat_text(base_url: str) -> tuple[str, str | None]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    stream = await client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text, finish = "", None
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.index == 0:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
    await client.close()
    return text, finish


async def test_openai_chat(upstream, proxy_url, logs) -> None:
    _, fake_url = upstream
    serve(upstream, corpus("openai-chat/basic-text-no-usage.sse"))
    direct = await openai_chat_text(fake_url + "/v1")
    via_proxy = await openai_chat_text(proxy_url + "/v1")
    assert via_proxy == direct and direct[0]
    [record] = await logs.wait()
    assert (record["state"], record["finish_reason"], record["route"]) == (
        "completed",
        direct[1],
        "openai",
    )
    assert record["text_chars"] == len(direct[0])
    assert record["model"] == "gpt-test"


async def test_openai_chat_cut_stream(upstream, proxy_url, logs) -> None:
    serve(upstream, corpus("openai-chat/derived-cut-mid-tool-args.sse"))
    _, finish = await openai_chat_text(proxy_url + "/v1")
    assert finish is None  # the SDK just ends: only the record tells the truth
    [record] = await logs.wait()
    assert record["state"] == "interrupted"
    # The call never completed: its arguments are not judged (the state says it was cut).
    assert record["tool_calls"][0]["arguments_valid_json"] is None
    assert "invalid_tool_arguments" not in record["anomalies"]


async def test_openai_chat_prefixed_provider(upstream, proxy_url, logs) -> None:
    serve(upstream, corpus("openai-chat/deepseek-reasoning-content.sse"))
    await openai_chat_text(proxy_url + "/deepseek")
    fake, _ = upstream
    assert fake.seen[-1].path_qs == "/chat/completions"  # the prefix is stripped
    [record] = await logs.wait()
    assert (record["route"], record["state"]) == ("deepseek", "completed")
    assert record["reasoning_chars"] > 0


async def test_openai_responses(upstream, proxy_url, logs) -> None:
    serve(upstream, corpus("openai-responses/text-basic.sse"))
    client = openai.AsyncOpenAI(base_url=proxy_url + "/v1", api_key="sk-test", max_retries=0)
    stream = await client.responses.create(model="gpt-test", input="hi", stream=True)
    text, final = "", None
    async for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == "response.completed":
            final = event.response.output_text
    await client.close()
    assert text == final
    [record] = await logs.wait()
    assert (record["dialect"], record["state"], record["text_chars"]) == (
        "openai-responses",
        "completed",
        len(text),
    )


async def test_anthropic_messages(upstream, proxy_url, logs) -> None:
    serve(upstream, corpus("anthropic-messages/parallel-tool-use.sse"))
    client = anthropic.AsyncAnthropic(base_url=proxy_url, api_key="k", max_retries=0)
    async with client.messages.stream(
        model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        message = await stream.get_final_message()
    await client.close()
    tools = [b for b in message.content if b.type == "tool_use"]
    [record] = await logs.wait()
    assert (record["state"], record["finish_reason"], record["route"]) == (
        "completed",
        message.stop_reason,
        "anthropic",
    )
    assert [t["id"] for t in record["tool_calls"]] == [t.id for t in tools]
    assert record["usage"]["output_tokens"] == message.usage.output_tokens


async def test_anthropic_overloaded_after_200(upstream, proxy_url, logs) -> None:
    body = sse(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "c",
                    "content": [],
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hal"},
            },
        ),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    serve(upstream, body)
    client = anthropic.AsyncAnthropic(base_url=proxy_url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIError):
        stream = await client.messages.create(
            model="claude-test",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        )
        async for _ in stream:
            pass
    await client.close()
    [record] = await logs.wait()
    assert (record["state"], record["error"]["type"], record["status"]) == (
        "failed",
        "overloaded_error",
        200,
    )


async def gemini_text(base_url: str) -> str:
    from google.genai import types

    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base_url))
    text = ""
    # Closed on the way out, cut or not: a session left to the garbage collector warns when
    # it happens to be collected, which fails whichever test is running then.
    async with client.aio as aio:
        async for chunk in await aio.models.generate_content_stream(
            model="gemini-test", contents="hi"
        ):
            text += chunk.text or ""
    return text


async def test_gemini(upstream, proxy_url, logs) -> None:
    _, fake_url = upstream
    serve(upstream, corpus("gemini/cjk-poem-stop-every-chunk.sse"))
    direct = await gemini_text(fake_url)
    via_proxy = await gemini_text(proxy_url)
    assert via_proxy == direct and direct
    fake, _ = upstream
    assert ":streamGenerateContent" in fake.seen[-1].path_qs
    [record] = await logs.wait()
    assert (record["route"], record["dialect"], record["state"]) == (
        "gemini",
        "gemini",
        "completed",
    )
    assert record["text_chars"] == len(direct)
    assert record["model"] == "gemini-test"


async def test_gemini_http_error(upstream, proxy_url, logs) -> None:
    serve(upstream, corpus("gemini/http-404-json-error-body.sse"), status=404)
    with pytest.raises(genai.errors.ClientError):
        await gemini_text(proxy_url)
    [record] = await logs.wait()
    # The code is always a string in the record: one type per field for log pipelines.
    assert (record["state"], record["status"], record["error"]["code"]) == (
        "http_error",
        404,
        "404",
    )
