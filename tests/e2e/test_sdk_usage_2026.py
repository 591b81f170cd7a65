"""Usage and fallback fields of mid-2026, through the proxy with the official SDKs.

Wire shapes from the SDKs' own types: anthropic-sdk-python 2.16 `types/beta/
beta_fallback_block.py` (a `fallback` block: `from`, `to`, `trigger`; no deltas) and
`beta_fallback_message_iteration_usage.py` (`usage.iterations` entry `fallback_message`: the
model that served the turn); openai-python 3.57 `types/responses/response_usage.py` and
`types/completion_usage.py` (`cache_write_tokens` beside `cached_tokens`). Each stream is
validated against those types before it is served, so a shape the SDK does not know fails."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pytest

from tests.e2e.test_sdk_clients import serve
from tests.streams import sse

pytestmark = pytest.mark.e2e
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

# What the SDKs at their floors lack (anthropic 0.40, openai 1.66): these tests need the SDKs'
# own models of the 2026 shapes, so they skip there rather than test a dict.
ANTHROPIC_FALLBACK = (
    importlib.util.find_spec("anthropic.types.beta.beta_fallback_block") is not None
)
OPENAI_CACHE_WRITES = "cache_write_tokens" in getattr(
    getattr(
        importlib.import_module("openai.types.responses.response_usage"), "InputTokensDetails", None
    ),
    "model_fields",
    {},
)
needs_fallback = pytest.mark.skipif(
    not ANTHROPIC_FALLBACK, reason="this anthropic has no beta fallback block (2.16 has)"
)
needs_cache_writes = pytest.mark.skipif(
    not OPENAI_CACHE_WRITES, reason="this openai's Responses usage has no cache_write_tokens"
)

ASKED, FALLBACK = "claude-opus-4-7", "claude-sonnet-4-6"


def fallback_stream() -> list[tuple[str, dict[str, Any]]]:
    usage = {"input_tokens": 20, "output_tokens": 1, "cache_creation_input_tokens": 0}
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": ASKED,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "cache_read_input_tokens": 0},
        },
    }
    block = {
        "type": "fallback",
        "from": {"model": ASKED},
        "to": {"model": FALLBACK},
        "trigger": {"type": "refusal", "category": "cyber"},
    }
    iteration = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    iterations = [
        {"type": "message", "model": ASKED, "input_tokens": 20, "output_tokens": 3, **iteration},
        {
            "type": "fallback_message",
            "model": FALLBACK,
            "input_tokens": 20,
            "output_tokens": 9,
            **iteration,
        },
    ]
    end_usage = {
        "input_tokens": 40,
        "output_tokens": 12,
        "cache_creation_input_tokens": 128,
        "cache_read_input_tokens": 0,
        "iterations": iterations,
    }
    return [
        ("message_start", start),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Here."},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": end_usage,
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


@needs_fallback
def test_the_fallback_stream_is_the_sdks_shape() -> None:
    from anthropic.types.beta import BetaRawMessageStreamEvent
    from pydantic import TypeAdapter

    adapter: Any = TypeAdapter(BetaRawMessageStreamEvent)
    events = [adapter.validate_python(data) for _, data in fallback_stream()]
    assert events[1].content_block.type == "fallback"
    assert events[1].content_block.to.model == FALLBACK
    assert events[-2].usage.iterations[-1].type == "fallback_message"


@needs_fallback
async def test_a_fallback_model_that_wrote_the_text_is_named(upstream, proxy_url, logs) -> None:
    serve(upstream, sse(*fallback_stream()))
    client = anthropic.AsyncAnthropic(base_url=proxy_url, api_key="k", max_retries=0)
    async with client.beta.messages.stream(
        model=ASKED, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        message = await stream.get_final_message()
    await client.close()
    assert [b.type for b in message.content] == ["fallback", "text"]
    [record] = await logs.wait()
    assert (record["state"], record["response_model"]) == ("completed", ASKED)
    assert (record["fallback_hops"], record["text_model"]) == (1, FALLBACK)
    assert not [a for a in record["anomalies"] if a.startswith("unknown")]
    assert record["usage"]["cache_write_tokens"] == message.usage.cache_creation_input_tokens == 128


RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "gpt-5",
    "status": "completed",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 2048,
        "input_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 512},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2053,
    },
}


@needs_cache_writes
async def test_openai_responses_cache_writes(upstream, proxy_url, logs) -> None:
    created = {**RESPONSE, "status": "in_progress", "usage": None}
    serve(
        upstream,
        sse(
            (
                "response.created",
                {"type": "response.created", "sequence_number": 0, "response": created},
            ),
            (
                "response.completed",
                {"type": "response.completed", "sequence_number": 1, "response": RESPONSE},
            ),
        ),
    )
    client = openai.AsyncOpenAI(base_url=proxy_url + "/v1", api_key="sk", max_retries=0)
    stream = await client.responses.create(model="gpt-5", input="hi", stream=True)
    final = [e async for e in stream][-1].response
    await client.close()
    assert final.usage.input_tokens_details.cache_write_tokens == 512  # the SDK reads it
    [record] = await logs.wait()
    assert (record["usage"]["cached_tokens"], record["usage"]["cache_write_tokens"]) == (1024, 512)


async def test_openai_chat_cache_writes(upstream, proxy_url, logs) -> None:
    usage = {
        "prompt_tokens": 2048,
        "completion_tokens": 5,
        "total_tokens": 2053,
        "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 256},
    }
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5"}
    serve(
        upstream,
        sse(
            {
                **chunk,
                "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
            },
            {**chunk, "choices": [], "usage": usage},
            "[DONE]",
        ),
    )
    client = openai.AsyncOpenAI(base_url=proxy_url + "/v1", api_key="sk", max_retries=0)
    stream = await client.chat.completions.create(
        model="gpt-5",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    last = [c async for c in stream][-1]
    await client.close()
    assert last.usage.prompt_tokens_details.cache_write_tokens == 256
    [record] = await logs.wait()
    assert record["usage"]["cache_write_tokens"] == 256
