"""A Responses stream carrying a custom tool call (apply_patch: free text), read by the official
openai client through the proxy (issue 31, point 5): main named the clean stream
`invalid_tool_arguments`; the client took the input as the text it is."""

from __future__ import annotations

import pytest

from tests.integration.fake_upstream import Script, Send
from tests.unit.test_custom_tool_calls import PATCH, custom_call_stream

openai = pytest.importorskip("openai")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not hasattr(openai.types.responses, "ResponseCustomToolCall"),
        reason="this openai has no custom tool calls (the floor's 1.66)",
    ),
]


async def test_openai_sdk_custom_tool_call_is_text_through_the_proxy(
    upstream, proxy_url, logs
) -> None:
    fake, _ = upstream
    body = custom_call_stream([PATCH[:25], PATCH[25:]])
    fake.script("/v1/responses", Script([Send(body[i : i + 41]) for i in range(0, len(body), 41)]))
    client = openai.AsyncOpenAI(base_url=proxy_url + "/v1", api_key="sk-test", max_retries=0)
    stream = await client.responses.create(model="gpt-5", input="fix it", stream=True)
    done = [e async for e in stream if e.type == "response.custom_tool_call_input.done"]
    await client.close()
    assert [e.input for e in done] == [PATCH]  # what the app gets: the patch, as text
    [record] = await logs.wait()
    assert (record["dialect"], record["state"]) == ("openai-responses", "completed")
    assert record["tool_calls"] == [
        {
            "id": "call_1",
            "name": "apply_patch",
            "arguments_bytes": len(PATCH),
            "arguments_valid_json": None,
        }
    ]
    assert "invalid_tool_arguments" not in record["anomalies"]
