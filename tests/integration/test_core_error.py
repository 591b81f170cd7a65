"""The hot path's guard, through the proxy: a bug in the analysis (an assembler that raises on
the relay's fast path) never breaks or cuts the bytes, and the record says the analysis went
blind (`core_error`) instead of claiming the stream `completed`. Issue 29: the suite never ran
this guard (the tap's own tests reach only the slow path's)."""

from __future__ import annotations

import hashlib

from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler
from tests.integration.fake_upstream import Script, Send, Sleep
from tests.streams import chat_chunk, sse

CHAT_PATH = "/v1/chat/completions"
# OpenAI Chat Completions streaming shape (platform.openai.com API reference, "The chat
# completion chunk object"): one `data:` line per chunk, then `data: [DONE]`.
FIRST = sse(chat_chunk("Hello, "))
REST = [sse(chat_chunk("wörld")), sse(chat_chunk("!")), sse(chat_chunk(finish="stop"), "[DONE]")]
WHOLE = FIRST + b"".join(REST)


def broken(self, *args):  # a stand-in for a bug in the assembler
    raise KeyError("bug")


async def test_a_bug_on_the_fast_path_forwards_every_byte_and_records_core_error(
    relay_mode, upstream, make_proxy, logs, monkeypatch
) -> None:
    # Both the block path and the whole-event path of the fast path raise; the first chunk
    # goes through the decoder (the tap settles on the fast path after it), the rest do not.
    monkeypatch.setattr(OpenAIChatAssembler, "take_block", broken)
    calls = {"on_event": 0}
    on_event = OpenAIChatAssembler.on_event

    def on_event_then_broken(self, event):
        calls["on_event"] += 1
        if calls["on_event"] > 1:
            raise KeyError("bug")
        return on_event(self, event)

    monkeypatch.setattr(OpenAIChatAssembler, "on_event", on_event_then_broken)
    fake, _ = upstream
    steps = [Send(FIRST)]
    for part in REST:
        steps += [Sleep(0.02), Send(part)]
    fake.script(CHAT_PATH, Script(steps))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={"model": "gpt-x", "stream": True})
    body = await resp.read()
    assert resp.status == 200
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(WHOLE).hexdigest()
    [record] = await logs.wait(1)
    assert record["bytes"] == len(WHOLE)
    assert record["anomalies"].get("core_error") == 1
    assert record["state"] != "completed"
    assert record["state"] == "unconfirmed"
