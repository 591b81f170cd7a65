"""Resumed and retried streams through the proxy, with a scripted upstream: every link verdict
for OpenAI Responses background resumes (`starting_after`) and SSE `Last-Event-ID`
reconnects, a retry after a cut, and the MCP Streamable HTTP dialect's states."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
import pytest

from sseproxy.core.resume import cursor_key
from tests.integration.fake_upstream import Close, FakeUpstream, Script, Send, Sleep, WaitFor

SSE = {"Content-Type": "text/event-stream"}
BACKGROUND = json.dumps({"model": "m", "stream": True, "background": True, "input": "hi"})


async def call(
    client: Any, logs: Any, method: str, path: str, body: str | None = None, **headers: str
) -> dict[str, Any]:
    """One request read to its end (a cut body is read as far as it goes); its record."""
    before = len(logs.records())
    async with client.request(method, path, data=body, headers=headers) as response:
        with contextlib.suppress(aiohttp.ClientPayloadError):  # the cut the test scripted
            await response.read()
    return (await logs.wait(before + 1))[-1]


# -- OpenAI Responses background mode: GET /v1/responses/{id}?stream=true&starting_after=N --


def rev(n: int, etype: str = "response.output_text.delta", **fields: Any) -> bytes:
    payload: dict[str, Any] = {"type": etype, "sequence_number": n, **fields}
    if etype == "response.output_text.delta":
        payload.setdefault("delta", f"w{n} ")
        payload |= {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    return f"event: {etype}\ndata: {json.dumps(payload)}\n\n".encode()


CREATED = rev(0, "response.created", response={"id": "resp_1", "status": "in_progress"})
COMPLETED = rev(
    9, "response.completed", response={"id": "resp_1", "status": "completed", "output": []}
)


async def responses_original(client: Any, upstream: FakeUpstream, logs: Any) -> dict[str, Any]:
    """A background response cut after sequence number 3: the client got 0..3."""
    steps = [Send(CREATED + rev(1) + rev(2) + rev(3)), Close()]
    upstream.script("/v1/responses", Script(steps, headers=SSE))
    record = await call(client, logs, "POST", "/v1/responses", BACKGROUND)
    assert (record["state"], record["response_id"]) == ("interrupted", "resp_1")
    return record


async def responses_resume(
    client: Any, upstream: FakeUpstream, logs: Any, after: int, *events: bytes
) -> dict[str, Any]:
    upstream.script("/v1/responses/resp_1", Script([Send(b"".join(events))], headers=SSE))
    path = f"/v1/responses/resp_1?stream=true&starting_after={after}"
    return await call(client, logs, "GET", path)


@pytest.fixture
async def proxy(make_proxy: Any, upstream: Any) -> Any:
    return await make_proxy()


async def test_responses_resume_from_the_right_cursor_is_continuous(proxy, upstream, logs):
    fake, _ = upstream
    original = await responses_original(proxy, fake, logs)
    record = await responses_resume(proxy, fake, logs, 3, rev(4), rev(5), COMPLETED)
    assert record["state"] == "completed"
    assert record["resume"] == {
        "of": original["request_id"],
        "cursor": "3",
        "verdict": "continuous",
        "first_event": "4",
        "replayed": 0,
        "missing": [],
        "missing_count": 0,
        "delivered_after_cursor": 0,
        "diverged": [],
    }


async def test_responses_resume_from_a_wrong_cursor_is_a_gap_the_client_caused(
    proxy, upstream, logs
):
    """The client had 0..3 but asked to resume after 1, and the server sent from 4: events 2
    and 3 were never sent on the resume; the proxy had written them to the client."""
    fake, _ = upstream
    await responses_original(proxy, fake, logs)
    record = await responses_resume(proxy, fake, logs, 1, rev(4), COMPLETED)
    link = record["resume"]
    assert (link["verdict"], link["missing"], link["delivered_after_cursor"]) == (
        "gap",
        ["2", "3"],
        2,
    )


async def test_responses_resume_that_replays_events_is_a_duplicate(proxy, upstream, logs):
    fake, _ = upstream
    await responses_original(proxy, fake, logs)
    record = await responses_resume(proxy, fake, logs, 3, rev(2), rev(3), rev(4), COMPLETED)
    assert (record["resume"]["verdict"], record["resume"]["replayed"]) == ("duplicate", 2)


async def test_responses_resume_that_rewrites_an_event_is_divergent(proxy, upstream, logs):
    fake, _ = upstream
    await responses_original(proxy, fake, logs)
    record = await responses_resume(proxy, fake, logs, 2, rev(3, delta="other "), COMPLETED)
    assert (record["resume"]["verdict"], record["resume"]["diverged"]) == ("divergent", ["3"])


async def test_responses_resume_of_a_response_never_seen_is_unknown_origin(proxy, upstream, logs):
    fake, _ = upstream
    record = await responses_resume(proxy, fake, logs, 3, rev(4), COMPLETED)
    assert record["resume"]["verdict"] == "unknown_origin" and record["resume"]["of"] is None


async def test_an_empty_resumed_stream_is_a_gap_on_its_own(proxy, upstream, logs):
    fake, _ = upstream
    await responses_original(proxy, fake, logs)
    upstream_bytes: list[bytes] = []
    record = await responses_resume(proxy, fake, logs, 1, *upstream_bytes)
    assert record["resume"]["first_event"] is None
    assert (record["resume"]["verdict"], record["resume"]["missing"]) == ("gap", ["2", "3"])


async def test_sending_the_request_again_after_a_cut_is_a_retry_not_a_resume(proxy, upstream, logs):
    fake, _ = upstream
    original = await responses_original(proxy, fake, logs)
    fake.script("/v1/responses", Script([Send(CREATED + rev(1) + COMPLETED)], headers=SSE))
    record = await call(proxy, logs, "POST", "/v1/responses", BACKGROUND)
    assert "resume" not in record
    assert record["retry"] == {
        "of": original["request_id"],
        "regenerated": True,
        "shared_prefix_chars": None,  # the proxy keeps no text unless keep_content
        "linked_by": "same_body",
    }


async def test_a_retry_with_kept_content_measures_the_shared_prefix(make_proxy, upstream, logs):
    fake, _ = upstream
    client = await make_proxy(keep_content=True)
    await responses_original(client, fake, logs)  # the user saw "w1 w2 w3 "
    again = CREATED + rev(1) + rev(2, delta="other ") + COMPLETED
    fake.script("/v1/responses", Script([Send(again)], headers=SSE))
    record = await call(client, logs, "POST", "/v1/responses", BACKGROUND)
    assert record["retry"]["shared_prefix_chars"] == len("w1 ")


async def test_the_same_request_after_a_completed_one_is_no_retry(proxy, upstream, logs):
    fake, _ = upstream
    fake.script("/v1/responses", Script([Send(CREATED + COMPLETED)], headers=SSE))
    await call(proxy, logs, "POST", "/v1/responses", BACKGROUND)
    record = await call(proxy, logs, "POST", "/v1/responses", BACKGROUND)
    assert "retry" not in record and "resume" not in record


async def test_links_are_counted_by_verdict(proxy, upstream, logs):
    fake, _ = upstream
    await responses_original(proxy, fake, logs)
    await responses_resume(proxy, fake, logs, 1, rev(4), COMPLETED)
    text = await (await proxy.get("/_sseproxy/metrics")).text()
    assert 'kind="resume"' in text and 'verdict="gap"' in text


# -- SSE Last-Event-ID ---------------------------------------------------------------------


def sev(n: int, data: str | None = None) -> bytes:
    return f"id: {n}\ndata: {data if data is not None else f'part {n}'}\n\n".encode()


async def sse_original(client: Any, upstream: FakeUpstream, logs: Any) -> dict[str, Any]:
    upstream.script(
        "/events", Script([Send(sev(1) + sev(2) + sev(3) + sev(4)), Close()], headers=SSE)
    )
    record = await call(client, logs, "GET", "/events")
    assert (record["state"], record["last_event_id"]) == ("interrupted", "4")
    return record


async def sse_resume(
    client: Any, upstream: FakeUpstream, logs: Any, last_id: str, *events: bytes
) -> dict[str, Any]:
    upstream.script("/events", Script([Send(b"".join(events))], headers=SSE))
    return await call(client, logs, "GET", "/events", **{"Last-Event-ID": last_id})


@pytest.mark.parametrize(
    ("last_id", "resumed", "verdict", "detail"),
    [
        ("4", [5, 6], "continuous", {"first_event": "5", "missing": []}),
        ("2", [5], "gap", {"missing": ["3", "4"], "delivered_after_cursor": 2}),
        ("4", [3, 4, 5], "duplicate", {"replayed": 2, "first_event": "3"}),
        ("3", [(4, "rewritten")], "divergent", {"diverged": ["4"]}),
        ("99", [100], "unknown_origin", {"of": None}),
    ],
)
async def test_last_event_id_reconnects(
    proxy, upstream, logs, last_id, resumed, verdict, detail
) -> None:
    fake, _ = upstream
    original = await sse_original(proxy, fake, logs)
    events = [sev(*e) if isinstance(e, tuple) else sev(e) for e in resumed]
    record = await sse_resume(proxy, fake, logs, last_id, *events)
    link = record["resume"]
    assert (link["verdict"], link["cursor"]) == (verdict, last_id)
    if verdict != "unknown_origin":
        assert link["of"] == original["request_id"]
    assert {k: link[k] for k in detail} == detail


async def test_a_last_event_id_is_linked_only_to_a_stream_of_the_same_target(proxy, upstream, logs):
    """Two streams with the same counters on two targets: a resume of the older one is linked
    to it, not to the newer stream that also sent id 2; on a third target it is linked to
    neither (before: to whichever stream of the route last sent the cursor)."""
    fake, _ = upstream
    originals = {}
    for room in ("a", "b"):  # b is the newer one
        fake.script("/events", Script([Send(sev(1) + sev(2) + sev(3)), Close()], headers=SSE))
        originals[room] = await call(proxy, logs, "GET", f"/events?room={room}")
    fake.script("/events", Script([Send(sev(3))], headers=SSE))
    same = await call(proxy, logs, "GET", "/events?room=a", **{"Last-Event-ID": "2"})
    assert (same["resume"]["of"], same["resume"]["verdict"]) == (
        originals["a"]["request_id"],
        "continuous",
    )
    fake.script("/events", Script([Send(sev(3))], headers=SSE))
    other = await call(proxy, logs, "GET", "/events?room=c", **{"Last-Event-ID": "2"})
    assert (other["resume"]["of"], other["resume"]["verdict"]) == (None, "unknown_origin")


async def test_a_long_last_event_id_is_compared_by_its_digest(proxy, upstream, logs):
    """Ids beyond 32 characters are kept as digests: the resume still finds its cursor, and
    the record names the digest, not the id."""
    fake, _ = upstream
    long_id = "x" * 4000
    body = f"id: {long_id}1\ndata: one\n\nid: {long_id}2\ndata: two\n\n".encode()
    fake.script("/events", Script([Send(body), Close()], headers=SSE))
    original = await call(proxy, logs, "GET", "/events")
    third = f"id: {long_id}3\ndata: three\n\n".encode()
    fake.script("/events", Script([Send(third)], headers=SSE))
    record = await call(proxy, logs, "GET", "/events", **{"Last-Event-ID": long_id + "1"})
    link = record["resume"]
    assert (link["of"], link["verdict"], link["missing"]) == (
        original["request_id"],
        "gap",
        [cursor_key(long_id + "2")],
    )
    assert link["cursor"] == cursor_key(long_id + "1") and long_id not in json.dumps(link)


async def test_a_reconnect_without_last_event_id_is_a_retry(proxy, upstream, logs):
    fake, _ = upstream
    original = await sse_original(proxy, fake, logs)
    fake.script("/events", Script([Send(sev(1))], headers=SSE))
    record = await call(proxy, logs, "GET", "/events")
    assert record["retry"]["of"] == original["request_id"] and "resume" not in record


async def test_a_ledger_of_zero_streams_links_nothing(make_proxy, upstream, logs):
    fake, _ = upstream
    client = await make_proxy(resume_ledger_streams=0)
    await sse_original(client, fake, logs)
    record = await sse_resume(client, fake, logs, "4", sev(5))
    assert "resume" not in record


async def test_the_ledger_keeps_its_stream_count(make_proxy, upstream, logs):
    """Two streams kept: a third evicts the first, whose cursor is then unknown."""
    fake, _ = upstream
    client = await make_proxy(resume_ledger_streams=2)
    await sse_original(client, fake, logs)
    for n in range(2):  # one more stream than the cap, with other ids
        fake.script("/other", Script([Send(sev(100 + n))], headers=SSE))
        await call(client, logs, "GET", "/other", **{"X-N": str(n)})
    record = await sse_resume(client, fake, logs, "4", sev(5))
    assert record["resume"]["verdict"] == "unknown_origin"


async def test_the_ledger_keeps_its_events_per_stream(make_proxy, upstream, logs):
    """Three events kept of four: the first cursor is gone, the second still links."""
    fake, _ = upstream
    client = await make_proxy(resume_ledger_events=3)
    await sse_original(client, fake, logs)
    gone = await sse_resume(client, fake, logs, "1", sev(2))
    assert gone["resume"]["verdict"] == "unknown_origin"
    await sse_original(client, fake, logs)
    kept = await sse_resume(client, fake, logs, "2", sev(3))
    assert kept["resume"]["verdict"] == "continuous"


async def test_the_ledger_forgets_after_its_time(make_proxy, upstream, logs):
    fake, _ = upstream
    client = await make_proxy(resume_ledger_seconds=0.05)
    await sse_original(client, fake, logs)
    await asyncio.sleep(0.1)
    record = await sse_resume(client, fake, logs, "4", sev(5))
    assert record["resume"]["verdict"] == "unknown_origin"


# -- MCP Streamable HTTP ---------------------------------------------------------------------

CALL = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e"}})
SESSION = {
    "Mcp-Session-Id": "sess-0123456789abcdef",
    "Authorization": "Bearer mcp-secret-token-123456",
}


def mev(event_id: str, message: dict[str, Any] | None) -> bytes:
    data = "" if message is None else json.dumps(message)
    return f"id: {event_id}\ndata: {data}\n\n".encode()


PRIME = b"id: s-0\nretry: 5000\ndata:\n\n"
PROGRESS = mev("s-1", {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
RESULT = mev("s-2", {"jsonrpc": "2.0", "id": 1, "result": {"content": []}})


async def mcp_call(client: Any, upstream: FakeUpstream, logs: Any, *steps: Any) -> dict[str, Any]:
    upstream.script("/mcp", Script(list(steps), headers=SSE))
    return await call(
        client, logs, "POST", "/mcp", CALL, **SESSION, **{"Content-Type": "application/json"}
    )


async def test_mcp_result_completes_and_names_the_session_never_the_authorization(
    proxy, upstream, logs
):
    fake, _ = upstream
    record = await mcp_call(proxy, fake, logs, Send(PRIME + PROGRESS + RESULT))
    assert (record["dialect"], record["state"]) == ("mcp", "completed")
    assert (record["mcp_session_id"], record["sse_retry_ms"]) == ("sess-0123456789abcdef", 5000)
    assert "mcp-secret-token-123456" not in json.dumps(logs.records())


async def test_mcp_error_fails_with_its_code(proxy, upstream, logs):
    fake, _ = upstream
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no such tool"}}
    record = await mcp_call(proxy, fake, logs, Send(PRIME + mev("s-2", error)))
    assert record["state"] == "failed"
    assert (record["error"]["code"], record["error"]["message"]) == ("-32601", "no such tool")


async def test_mcp_notifications_cancelled_is_cancelled(proxy, upstream, logs):
    fake, _ = upstream
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    record = await mcp_call(proxy, fake, logs, Send(PRIME + mev("s-2", cancel)))
    assert record["state"] == "cancelled"


async def test_mcp_json_body_response(proxy, upstream, logs):
    fake, _ = upstream
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode()
    fake.script("/mcp", Script([Send(body)], headers={"Content-Type": "application/json"}))
    record = await call(proxy, logs, "POST", "/mcp", CALL, **{"Content-Type": "application/json"})
    assert (record["dialect"], record["state"]) == ("mcp", "completed")


async def test_mcp_client_disconnect_before_the_response_is_interrupted(proxy, upstream, logs):
    fake, _ = upstream
    hold = asyncio.Event()
    fake.script("/mcp", Script([Send(PRIME + PROGRESS), WaitFor(hold)], headers=SSE))
    async with proxy.post("/mcp", data=CALL, headers=SESSION) as response:
        got = b""
        while b"s-1" not in got:
            got += await response.content.readany()
        response.connection.transport.abort()
    record = (await logs.wait())[-1]
    hold.set()
    assert record["state"] == "interrupted"  # a disconnect is not a cancellation in MCP
    assert record["interruption"]["reason"] == "client_disconnected"


async def test_mcp_resume_with_last_event_id_and_a_reconnect_sooner_than_retry(
    proxy, upstream, logs
):
    fake, _ = upstream
    original = await mcp_call(proxy, fake, logs, Send(PRIME + PROGRESS), Close())
    assert original["state"] == "interrupted"
    fake.script("/mcp", Script([Send(RESULT)], headers=SSE))
    record = await call(proxy, logs, "GET", "/mcp", **SESSION, **{"Last-Event-ID": "s-1"})
    assert record["state"] == "completed"  # the response to request 1 arrived on the resume
    assert (record["resume"]["verdict"], record["resume"]["of"]) == (
        "continuous",
        original["request_id"],
    )
    assert record["anomalies"].get("reconnect_before_retry") == 1  # retry: 5000, came at once
    seen = fake.seen[-1]
    assert (seen.headers["Last-Event-ID"], seen.headers["Mcp-Session-Id"]) == (
        "s-1",
        "sess-0123456789abcdef",
    )


async def test_mcp_resume_in_another_session_is_unknown_origin(proxy, upstream, logs):
    fake, _ = upstream
    await mcp_call(proxy, fake, logs, Send(PRIME + PROGRESS), Close())
    fake.script("/mcp", Script([Send(RESULT)], headers=SSE))
    other = {"Mcp-Session-Id": "sess-other", "Last-Event-ID": "s-1"}
    record = await call(proxy, logs, "GET", "/mcp", **other)
    assert record["resume"]["verdict"] == "unknown_origin"


async def test_mcp_404_on_a_session_is_session_expired(proxy, upstream, logs):
    fake, _ = upstream
    fake.script("/mcp", Script([Send(b"")], status=404, headers={"Content-Type": "text/plain"}))
    record = await call(proxy, logs, "POST", "/mcp", CALL, **SESSION)
    assert record["state"] == "http_error"
    assert record["anomalies"].get("session_expired") == 1


async def test_mcp_slow_stream_still_waits_for_the_response(proxy, upstream, logs):
    fake, _ = upstream
    record = await mcp_call(proxy, fake, logs, Send(PRIME), Sleep(0.05), Send(RESULT))
    assert record["state"] == "completed" and record["anomalies"] == {}


async def test_a_second_resume_is_judged_against_the_stream_holding_its_cursor(
    proxy, upstream, logs
):
    """Cut at 3, resumed and cut again at 5, resumed from 3 again: linked to the original
    (the stream that holds cursor 3); then resumed from 5, replaying 4 and 5: linked to the
    resume that holds 5, and a duplicate."""
    fake, _ = upstream
    original = await responses_original(proxy, fake, logs)
    fake.script("/v1/responses/resp_1", Script([Send(rev(4) + rev(5)), Close()], headers=SSE))
    path = "/v1/responses/resp_1?stream=true&starting_after=3"
    first = await call(proxy, logs, "GET", path)
    assert first["state"] == "interrupted"
    record = await responses_resume(proxy, fake, logs, 3, rev(4), rev(5), rev(6), COMPLETED)
    assert record["resume"]["of"] == original["request_id"]  # the one that holds cursor 3
    assert record["resume"]["verdict"] == "continuous"
    again = await responses_resume(proxy, fake, logs, 5, rev(4), rev(5), rev(6), COMPLETED)
    assert (again["resume"]["of"], again["resume"]["verdict"]) == (
        record["request_id"],
        "duplicate",
    )
