"""Issue 31's Gemini Interactions through the installed `sseproxy` command on its defaults (the
bundled `gemini` route takes `/v1/interactions`, where google-genai sends it on a custom
base_url), read by google-genai's own interactions client: a failed interaction is recorded
`failed` and a cut one `interrupted` (main read both as plain SSE: `unconfirmed`)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from google import genai
from google.genai import types

from tests.product.fake_provider import FakeProvider
from tests.product.proxy_process import ProxyProcess

pytestmark = pytest.mark.product
pytest.importorskip("google.genai.interactions")
CLIENT_TIMEOUT = 30.0


async def interaction(base_url: str, name: str) -> tuple[str, str | None]:
    """The text of a streamed interaction and its final status (None: the stream broke)."""
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base_url))
    text, status = "", None
    async with asyncio.timeout(CLIENT_TIMEOUT), client.aio as aio:
        try:
            async for event in await aio.interactions.create(model=name, input="hi", stream=True):
                if event.event_type == "step.delta":
                    text += event.delta.text or ""
                elif event.event_type == "interaction.completed":
                    status = event.interaction.status
        except Exception:  # a cut stream: the SDK raises its own error
            status = None
    return text, status


@pytest.mark.parametrize(
    ("kind", "status", "state"),
    [
        ("ok", "completed", "completed"),
        ("failed", "failed", "failed"),
        ("cut", None, "interrupted"),
    ],
)
async def test_gemini_interactions_stream(
    proxy: ProxyProcess, fake: FakeProvider, kind: str, status: str | None, state: str
) -> None:
    name = f"{kind}-{uuid.uuid4().hex[:10]}"
    direct = await interaction(fake.url, name)
    via_proxy = await interaction(proxy.url, name)
    assert via_proxy == direct and direct[1] == status
    [record] = await proxy.wait_records(lambda r: r.get("model") == name)
    assert (record["route"], record["dialect"], record["state"]) == (
        "gemini",
        "gemini-interactions",
        state,
    )
    assert record["path"] == "/v1/interactions"
