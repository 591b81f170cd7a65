"""The shell's side of delivery and pacing: what the client accepted and how long writes
waited for it, a keep-alive-only stall logged or cut at --content-timeout, the pacing figures
in the record."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from sseproxy.shell.app import HELD_CLIENT_SECONDS, STATE
from tests.integration.fake_upstream import Script, Send, Sleep, WaitFor
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
KEEP_ALIVE = b": keep-alive\n\n"


async def test_a_slow_reading_client_shows_in_client_wait_not_in_max_gap(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    block = b"data: " + b"y" * 65_530 + b"\n\n"
    fake.script(PATH, Script([Send(block)] * 400))  # 26 MB, as fast as the proxy takes it
    client = await make_proxy()
    resp = await client.post(PATH, json={})
    await resp.content.readexactly(1024)
    # The client reads nothing for a while: once the socket buffers are full (~130 ms on a
    # slow 2-core CI), the proxy's writes wait.
    await asyncio.sleep(1.0)
    rest = await resp.read()
    [record] = await logs.wait(1)
    assert record["client_bytes"] == 1024 + len(rest) == len(block) * 400
    assert record["client_wait_ms"] >= 500  # most of the pause was spent waiting to write
    assert record["max_gap_ms"] < record["client_wait_ms"]  # the upstream was never silent
    assert "events_delivered" not in record  # a whole stream needs no pointer
    detail = await (await client.get(f"/_sseproxy/streams/{record['request_id']}")).json()
    waits = detail["client_waits"]
    waited = sum(w["to_ms"] - w["from_ms"] for w in waits)
    assert waited >= 500  # the inspector draws the same back-pressure beside the chunks


class EndsSeen:
    """Stands in for the proxy's MemoryReturn: counts the ends it is told of."""

    def __init__(self) -> None:
        self.ends = 0

    def ended(self) -> None:
        self.ends += 1

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("pushed_back", [True, False], ids=["slow_client", "fast_client"])
async def test_a_response_its_client_pushed_back_asks_for_memory_to_be_given_back(
    pushed_back, upstream, make_proxy, logs
) -> None:
    """The bytes held for a client that stopped reading go back to the system after a burst
    of such ends (shell/memory.py); a client that kept up costs no collection."""
    fake, _ = upstream
    block = b"data: " + b"y" * 65_530 + b"\n\n"
    # 26 MB, as fast as the proxy takes it: more than loopback's socket buffers hold (6.5 MB
    # sometimes fitted in them, and the proxy's writes then hardly waited)
    fake.script(PATH, Script([Send(block)] * 400))
    client = await make_proxy()
    seen = EndsSeen()
    client.app[STATE].memory = seen
    resp = await client.post(PATH, json={})
    if pushed_back:
        await resp.content.readexactly(1024)
        # the socket buffers fill, then the proxy's writes wait past HELD_CLIENT_SECONDS
        await asyncio.sleep(HELD_CLIENT_SECONDS + 1.0)
    rest = await resp.read()
    [record] = await logs.wait(1)
    assert len(rest) > 0
    assert (record["client_wait_ms"] >= HELD_CLIENT_SECONDS * 1000) is pushed_back
    assert seen.ends == (1 if pushed_back else 0)


async def test_a_client_leaving_mid_stream_is_told_where_it_left(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    never = asyncio.Event()
    fake.script(PATH, Script([Send(sse(chat_chunk("a"), chat_chunk("b"))), WaitFor(never)]))
    client = await make_proxy()
    resp = await client.post(PATH, json={})
    await resp.content.readuntil(b'"b"')
    resp.close()
    [record] = await logs.wait(1)
    assert record["state"] == "cancelled"
    assert (record["events_delivered"], record["last_event_delivered"]) == (2, "chunk")


@pytest.mark.parametrize("action", ["log", "cut"])
async def test_a_keepalive_only_stall_is_counted_or_cut_at_the_content_timeout(
    action, upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    steps = [Send(sse(chat_chunk("Hel")))]
    steps += [s for _ in range(8) for s in (Sleep(0.1), Send(KEEP_ALIVE))]
    steps += [Send(sse(chat_chunk("lo"), chat_chunk(finish="stop"), "[DONE]"))]
    fake.script(PATH, Script(steps))
    client = await make_proxy(content_timeout=0.4, content_stall_action=action, idle_timeout=5)
    resp = await client.post(PATH, json={})
    if action == "cut":
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    else:
        await resp.read()
    [record] = await logs.wait(1)
    assert record["anomalies"]["content_stall"] == 1
    if action == "cut":
        assert (record["state"], record["interruption"]["reason"]) == (
            "interrupted",
            "content_timeout",
        )
        assert record["last_event_delivered"] == "chunk"
    else:
        assert record["state"] == "completed"
        assert record["comments"] == 8


async def test_pacing_figures_reach_the_record(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    usage = {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
    end = sse({**chat_chunk(finish="stop"), "usage": usage}, "[DONE]")
    fake.script(
        PATH,
        Script([Send(sse(chat_chunk("a"))), Sleep(0.2), Send(sse(chat_chunk("b")) + end)]),
    )
    client = await make_proxy()
    await (await client.post(PATH, json={})).read()
    [record] = await logs.wait(1)
    burst = record["content_burst_ms"]  # from the first content delta to the last
    assert burst > 0
    # 10 output tokens over that span (the figures are rounded to a microsecond)
    assert record["output_tokens_per_s"] * burst / 1000 == pytest.approx(10, rel=1e-2)
    # one time to first content: ttft_ms (time_to_first_content_ms was a second reading)
    assert record["ttft_ms"] is not None and "time_to_first_content_ms" not in record


@pytest.mark.parametrize("action", ["log", "cut"])
async def test_the_keepalive_stall_drill_through_the_proxy(
    action, upstream, make_proxy, logs
) -> None:
    """`x-sseproxy-inject: keepalive-stall=1`: one event, then only keep-alives, until the
    content timeout cuts (cut) or the client gives up (log)."""
    fake, _ = upstream
    fake.script(PATH, Script([Send(sse(chat_chunk("Hel"), chat_chunk("lo"), "[DONE]"))]))
    client = await make_proxy(
        allow_inject=True, content_timeout=0.5, content_stall_action=action, idle_timeout=30
    )
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "keepalive-stall=1"})
    if action == "cut":
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    else:
        await resp.content.readuntil(KEEP_ALIVE)
        await resp.content.readuntil(KEEP_ALIVE)  # the second comes after the content timeout
        resp.close()
    [record] = await logs.wait(1)
    assert record["anomalies"]["content_stall"] == 1
    assert record["comments"] >= (1 if action == "cut" else 2)
    assert record["text_chars"] == 3  # "Hel": nothing after the first event
    expected = ("interrupted", "content_timeout") if action == "cut" else ("cancelled", None)
    reason = record["interruption"]["reason"] if action == "cut" else None
    assert (record["state"], reason) == expected
