"""The inspector's page and feed without a browser: the first paint carries the current rows,
updates are coalesced into batches serialised once for all viewers, and the number of viewers
and their backlog are bounded."""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp
import orjson
import pytest

from sseproxy.inspector.endpoints import SUBSCRIBER_QUEUE, Inspector, StreamView, Viewer
from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Close, Script, Send
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"


def snapshot_of(html: str) -> list[dict]:
    match = re.search(r"const SNAPSHOT = (.*);\n", html)
    assert match, "the page carries no snapshot"
    rows: list[dict] = json.loads(match.group(1))
    return rows


async def test_first_paint_carries_the_current_rows(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(sse(chat_chunk("Hi"))), Close()]))
    client = await make_proxy()
    hostile = "</script><script>alert(1)</script>"
    resp = await client.post(PATH, json={"model": hostile})
    with pytest.raises(aiohttp.ClientPayloadError):  # the cut reaches the client
        await resp.read()
    [record] = await logs.wait(1)
    html = await (await client.get("/_sseproxy/")).text()
    [row] = snapshot_of(html)
    assert (row["request_id"], row["state"]) == (record["request_id"], "interrupted")
    assert row["interruption"]["reason"] == "upstream_closed"
    assert row["model"] == hostile
    assert "<script>alert(1)" not in html  # the path cannot close the script element
    empty = await (await make_proxy()).get("/_sseproxy/")
    assert snapshot_of(await empty.text()) == []


def view(request_id: str, state: str = "streaming") -> StreamView:
    v = StreamView(request_id, "POST", PATH, time.time(), time.monotonic())
    v.state = state
    return v


def test_updates_are_coalesced_and_serialised_once_for_all_viewers() -> None:
    inspector = Inspector()
    viewers = [Viewer() for _ in range(3)]
    inspector.subscribers.update(viewers)
    a, b = view("a"), view("b")
    inspector.started(a)
    inspector.started(b)
    for _ in range(50):  # a busy stream publishes often...
        inspector.publish(a)
    a.state = "completed"
    inspector.active.pop("a")
    inspector.publish(a)
    inspector.flush()  # ...viewers get one batch with the latest state of each row
    messages = [v.queue.get_nowait() for v in viewers]
    assert all(v.queue.empty() for v in viewers)
    assert messages[0] is messages[1] is messages[2]  # the same bytes, serialised once
    rows = orjson.loads(messages[0].removeprefix(b"data: "))
    assert sorted((r["request_id"], r["state"]) for r in rows) == [
        ("a", "completed"),
        ("b", "streaming"),
    ]
    inspector.flush()  # nothing changed but the running stream's progress
    rows = orjson.loads(viewers[0].queue.get_nowait().removeprefix(b"data: "))
    assert [r["request_id"] for r in rows] == ["b"]
    for v in viewers[1:]:
        v.queue.get_nowait()
    inspector.flush(progress=False)  # nothing changed, no progress due: nothing sent
    assert all(v.queue.empty() for v in viewers)


def test_a_viewer_that_falls_behind_is_dropped() -> None:
    inspector = Inspector()
    slow = Viewer()
    inspector.subscribers.add(slow)
    inspector.started(view("a"))  # running: every flush carries it
    for _ in range(SUBSCRIBER_QUEUE):
        inspector.flush()
    assert slow.queue.full() and not slow.lagging
    inspector.flush()  # one more
    assert slow.lagging


async def test_feed_viewers_are_capped(make_proxy) -> None:
    client = await make_proxy()
    client.app[STATE].inspector.max_viewers = 2
    feeds = [await client.get("/_sseproxy/events") for _ in range(2)]
    for feed in feeds:
        assert feed.status == 200
        assert (await feed.content.readuntil(b"\n\n")).startswith(b"data: [")  # snapshot
    refused = await client.get("/_sseproxy/events")  # one more
    assert refused.status == 503
    assert (await refused.json())["error"]["type"] == "sseproxy_too_many_viewers"
    feeds[0].close()
    inspector = client.app[STATE].inspector
    for _ in range(200):  # the server notices the closed feed and frees its place
        if len(inspector.subscribers) < 2:
            break
        await asyncio.sleep(0.01)
    again = await client.get("/_sseproxy/events")
    assert again.status == 200
    again.close()
    feeds[1].close()


async def test_pages_on_other_sites_cannot_take_the_feed_slots(make_proxy) -> None:
    """What a page elsewhere can make a browser send (an iframe's, fetch's or EventSource's
    request on `localhost`) is refused before it holds a slot; the real page still gets one."""
    client = await make_proxy()
    inspector = client.app[STATE].inspector
    inspector.max_viewers = 1
    for headers in (
        {"Host": "localhost:8790", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "iframe"},
        {"Host": "127.0.0.1:8790", "Origin": "https://evil.example"},
    ):
        refused = await client.get("/_sseproxy/events", headers=headers)
        assert refused.status == 403
        assert (await refused.json())["error"]["type"] == "sseproxy_cross_site"
    assert len(inspector.subscribers) == 0
    own = await client.get("/_sseproxy/events", headers={"Sec-Fetch-Site": "same-origin"})
    assert own.status == 200
    own.close()


@pytest.mark.parametrize("path", ["/_sseproxy/", "/_sseproxy/events"])
async def test_the_inspector_cannot_be_framed(make_proxy, path: str) -> None:
    client = await make_proxy()
    resp = await client.get(path)
    assert resp.status == 200
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert resp.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
    resp.close()


def test_rows_carry_the_output_speed() -> None:
    inspector = Inspector()
    inspector.started(view("a"))
    record = {"method": "POST", "path": PATH, "state": "completed", "output_tokens_per_s": 61.25}
    inspector.finished("a", record, None)
    assert inspector.streams["a"].row()["output_tokens_per_s"] == 61.25


def test_the_timeline_is_bounded_packed_and_shown_in_the_detail() -> None:
    # 2,000 streams of 400 chunks held ~80 MB of timeline as tuples of boxed numbers.
    import tracemalloc

    from sseproxy.inspector.endpoints import TIMELINE_POINTS

    v = view("a")
    v.timeline.add(v.start + 0.010, 120, 1)
    assert v.detail()["timeline"] == [{"t_ms": 10.0, "bytes": 120, "content": 1}]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(TIMELINE_POINTS):  # one more than the bound, with the first
            v.timeline.add(v.start + 1 + i / 1000, 1000 + i, i % 3)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(v.timeline) == TIMELINE_POINTS
    assert held <= 24 * TIMELINE_POINTS  # bytes per point; a tuple of three boxed numbers ~100
    assert v.detail()["timeline"][-1] == {"t_ms": 4998.0, "bytes": 4998, "content": 2}


def test_client_waits_are_bounded_and_shown_in_the_detail() -> None:
    from sseproxy.inspector.endpoints import WAIT_SPANS

    v = view("a")
    v.client_wait(v.start + 0.010, v.start + 0.025)
    v.client_wait(v.start + 0.030, v.start + 0.030)  # no wait at all: not a span
    assert v.detail()["client_waits"] == [{"from_ms": 10.0, "to_ms": 25.0}]
    v.client_wait(v.start + 0.026, v.start + 0.040)  # the same blocked stretch goes on
    assert v.detail()["client_waits"] == [{"from_ms": 10.0, "to_ms": 40.0}]
    for i in range(WAIT_SPANS):  # one more than the bound, with the first
        v.client_wait(v.start + i, v.start + i + 0.5)
    assert len(v.client_waits) == WAIT_SPANS
