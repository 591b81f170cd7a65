"""The inspector's detail of one stream, without a browser: the event list agrees with the
record's counts for Chat, Anthropic and Bedrock; the raw view keeps the chunk boundaries and
marks the cut tail; headers are redacted as a capture keeps them; every retained thing is
bounded (one more than each bound is not kept); captures are downloaded by request id only."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sseproxy.capture.format import CaptureSettings
from sseproxy.capture.store import CaptureStore
from sseproxy.config import ConfigError, load
from sseproxy.inspector.endpoints import HEADER_CHARS, MAX_HEADERS, shown_headers
from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Close, Script, Send, Sleep
from tests.streams import chat_chunk, sse
from tests.unit.test_transport_truth import ANTHROPIC, BEDROCK_CONVERSE, BEDROCK_INVOKE, CHAT

EVENTSTREAM = {"Content-Type": "application/vnd.amazon.eventstream"}
KEY = "sk-ant-api03-inspectorsecret0123456789"


async def detail(client: Any, request_id: str) -> dict[str, Any]:
    resp = await client.get(f"/_sseproxy/streams/{request_id}")
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    return body


async def one(client: Any, logs: Any, path: str, **kwargs: Any) -> tuple[dict[str, Any], bool]:
    """Send one request, read it all; its record, and whether the client saw a break."""
    before = len(logs.records())
    broke = False
    try:
        await (await client.post(path, json={"model": "m", "stream": True}, **kwargs)).read()
    except aiohttp.ClientPayloadError:
        broke = True
    for _ in range(300):
        if len(logs.records()) > before:
            break
        await asyncio.sleep(0.01)
    record: dict[str, Any] = logs.records()[-1]
    return record, broke


def split(data: bytes, parts: int) -> list[bytes]:
    size = -(-len(data) // parts)
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize(
    ("case", "path", "headers"),
    [
        (CHAT, "/v1/chat/completions", None),
        (ANTHROPIC, "/v1/messages", None),
        (BEDROCK_CONVERSE, "/model/m/converse-stream", EVENTSTREAM),
        (BEDROCK_INVOKE, "/model/m/invoke-with-response-stream", EVENTSTREAM),
    ],
    ids=["chat", "anthropic", "bedrock-converse", "bedrock-invoke"],
)
async def test_the_event_list_matches_what_the_record_counted(
    case: Any, path: str, headers: dict[str, str] | None, upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    body = case.decided + case.marker
    steps: list[Any] = []
    for piece in split(body, 3):  # three chunks, apart in time: three boundaries
        steps += [Send(piece), Sleep(0.03)]
    fake.script(path, Script(steps, headers=headers or {"Content-Type": "text/event-stream"}))
    client = await make_proxy(keep_content=True)
    record, _ = await one(client, logs, path)
    d = await detail(client, record["request_id"])
    assert d["retained"] == "kept"
    kinds = [e["kind"] for e in d["events"]]
    counted = [k for k in kinds if k != "comment"]
    assert len(counted) == record["events"] and kinds.count("comment") == record["comments"]
    times = [e["t_ms"] for e in d["events"]]
    assert times == sorted(times) and times[-1] > times[0]  # stamped by their chunk's arrival
    assert [c["size"] for c in d["raw"]] == [len(p) for p in split(body, 3)]
    assert [c["offset"] for c in d["raw"]] == [
        0,
        len(split(body, 3)[0]),
        2 * len(split(body, 3)[0]),
    ]
    if headers:
        assert all(k == "message" for k in kinds)
        assert "contentBlockDelta" in [e["type"] for e in d["events"]] or "chunk" in [
            e["type"] for e in d["events"]
        ]
    assert "Hi" in d["content"]["text"] or "Hello" in d["content"]["text"]


async def test_the_raw_view_marks_the_unfinished_tail_at_a_cut(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    tail = b'data: {"id":"c","cho'
    fake.script(
        "/v1/chat/completions",
        Script(
            [
                Send(sse(chat_chunk("Once"))),
                Sleep(0.02),
                Send(sse(chat_chunk(" upon")) + tail),
                Close(),
            ]
        ),
    )
    client = await make_proxy(keep_content=True)
    record, broke = await one(client, logs, "/v1/chat/completions")
    assert broke and record["interruption"]["partial_event_bytes"] == len(tail)
    d = await detail(client, record["request_id"])
    first, last = d["raw"]
    assert "tail" not in first
    assert last["tail"] == tail.decode() and last["text"] == sse(chat_chunk(" upon")).decode()
    assert "partial_event_discarded" in d["anomalies_at_end"]
    assert len(d["events"]) == record["events"] == 2


async def test_headers_and_bytes_are_redacted_as_the_record_is(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    echo = sse(chat_chunk(f"your key is {KEY}"), chat_chunk(finish="stop"), "[DONE]")
    fake.script(
        "/v1/chat/completions",
        Script([Send(echo)], headers={"Content-Type": "text/event-stream", "X-Echo": KEY}),
    )
    client = await make_proxy(keep_content=True)
    record, _ = await one(
        client, logs, f"/v1/chat/completions?key={KEY}", headers={"x-api-key": KEY}
    )
    d = await detail(client, record["request_id"])
    text = str(d)
    assert KEY not in text
    assert d["request_headers"]["x-api-key"] == "[redacted]"
    assert d["response_headers"]["X-Echo"] != KEY and d["response_headers"]["X-Echo"]
    assert d["path"] == record["path"] and "key=[redacted]" in d["path"]
    assert "*" * len(KEY) in d["raw"][0]["text"]  # masked with as many bytes
    assert (d["record"]["request_id"], d["record"]["path"]) == (
        record["request_id"],
        record["path"],
    )


async def test_without_keep_content_no_bytes_are_kept(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script("/v1/chat/completions", Script([Send(sse(chat_chunk("Hi"), "[DONE]"))]))
    client = await make_proxy()
    record, _ = await one(client, logs, "/v1/chat/completions")
    d = await detail(client, record["request_id"])
    assert d["retained"] == "off" and "events" not in d and "raw" not in d
    assert client.app[STATE].inspector.budget.used == 0


async def test_bytes_per_stream_and_in_all_are_bounded(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    body = sse(chat_chunk("x" * 50), "[DONE]")
    fake.script("/v1/chat/completions", Script([Send(body)]))
    client = await make_proxy(keep_content=True, inspector_stream_bytes=len(body))
    record, _ = await one(client, logs, "/v1/chat/completions")
    d = await detail(client, record["request_id"])
    assert (d["kept_bytes"], d["dropped_bytes"]) == (len(body), 0)  # exactly the bound: all

    client = await make_proxy(keep_content=True, inspector_stream_bytes=len(body) - 1)
    record, _ = await one(client, logs, "/v1/chat/completions")
    d = await detail(client, record["request_id"])
    assert (d["kept_bytes"], d["dropped_bytes"]) == (len(body) - 1, 1)  # one more: not kept

    client = await make_proxy(keep_content=True, inspector_total_bytes=len(body) + 10)
    first, _ = await one(client, logs, "/v1/chat/completions")
    second, _ = await one(client, logs, "/v1/chat/completions")
    assert (await detail(client, first["request_id"]))["dropped_bytes"] == 0
    d = await detail(client, second["request_id"])
    assert (d["kept_bytes"], d["dropped_bytes"]) == (10, len(body) - 10)
    assert client.app[STATE].inspector.budget.used == len(body) + 10


async def test_only_the_newest_streams_keep_their_events(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    fake.script("/v1/chat/completions", Script([Send(sse(chat_chunk("Hi"), "[DONE]"))]))
    client = await make_proxy(keep_content=True, inspector_streams=2, capture_dir=str(tmp_path))
    ids = []
    for _ in range(3):  # one more than the bound
        record, _ = await one(client, logs, "/v1/chat/completions")
        ids.append(record["request_id"])
    await client.app[STATE].captures.drain()
    oldest = await detail(client, ids[0])
    assert oldest["retained"] == "gone" and "events" not in oldest
    assert oldest["capture"]["file"].endswith(f"{ids[0]}.json")  # where the events still are
    for request_id in ids[1:]:
        assert (await detail(client, request_id))["retained"] == "kept"
    assert client.app[STATE].inspector.budget.used == 2 * len(sse(chat_chunk("Hi"), "[DONE]"))


async def test_events_listed_and_their_data_are_bounded(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    events = [chat_chunk("a"), chat_chunk("b"), chat_chunk("c"), "[DONE]"]
    fake.script("/v1/chat/completions", Script([Send(sse(*events))]))
    client = await make_proxy(keep_content=True, inspector_events=3, inspector_chars=10)
    record, _ = await one(client, logs, "/v1/chat/completions")
    d = await detail(client, record["request_id"])
    assert len(d["events"]) == 3 and d["events_omitted"] == 1
    assert all(len(e["data"]) == 10 and e["truncated"] for e in d["events"])
    assert all(len(e["gist"]) <= 10 for e in d["events"])
    assert all(len(c["text"]) <= 10 and c["truncated"] for c in d["raw"])

    exactly = await make_proxy(keep_content=True, inspector_events=4, inspector_chars=7)
    fake.script("/v1/chat/completions", Script([Send(sse(*events))]))
    record, _ = await one(exactly, logs, "/v1/chat/completions")
    d = await detail(exactly, record["request_id"])
    assert len(d["events"]) == 4 and d["events_omitted"] == 0
    assert d["events"][-1] | {"t_ms": 0} == {
        "t_ms": 0,
        "kind": "event",
        "type": "message",
        "size": len(b"data: [DONE]\n\n"),  # the bytes on the wire, not the data's
        "data": "[DONE]",
        "gist": "[DONE]",
        "truncated": False,
        "anomalies": [],
    }


def test_headers_shown_are_bounded() -> None:
    many = {f"h{i}": "v" for i in range(MAX_HEADERS + 1)}
    assert len(shown_headers(many)) == MAX_HEADERS
    long = {"a": "x" * (HEADER_CHARS + 1), "b": "y" * HEADER_CHARS}
    assert shown_headers(long) == {"a": "x" * HEADER_CHARS, "b": "y" * HEADER_CHARS}


@pytest.mark.parametrize(
    "key",
    ["inspector_events", "inspector_chars", "inspector_stream_bytes", "inspector_total_bytes"],
)
def test_retention_bounds_must_be_positive(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load(None, {}, {key: 0})
    with pytest.raises(ConfigError, match="inspector_streams"):
        load(None, {}, {"inspector_streams": -1})


async def test_capture_files_are_downloaded_by_request_id(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    body = sse(chat_chunk("Hi"), "[DONE]")
    fake.script("/v1/chat/completions", Script([Send(body)]))
    (tmp_path / "secret.json").write_text('{"not": "a capture"}')
    client = await make_proxy(keep_content=True, capture_dir=str(tmp_path / "caps"))
    record, _ = await one(client, logs, "/v1/chat/completions")
    await client.app[STATE].captures.drain()
    request_id = record["request_id"]
    d = await detail(client, request_id)
    assert d["capture"]["replay"].startswith("sseproxy replay ")
    assert d["capture"]["replay"].endswith(f"-{request_id}.json")
    sidecar = await client.get(f"/_sseproxy/{d['capture']['sidecar']}")
    assert sidecar.status == 200 and (await sidecar.json())["request_id"] == request_id
    assert "attachment" in sidecar.headers["Content-Disposition"]
    assert await (await client.get(f"/_sseproxy/{d['capture']['body']}")).read() == body
    for bad in (
        f"/_sseproxy/captures/{request_id}/..%2F..%2Fsecret.json",
        "/_sseproxy/captures/..%2Fsecret/sidecar",
        "/_sseproxy/captures/../secret/sidecar",
        "/_sseproxy/captures/%2E%2E/sidecar",
        f"/_sseproxy/captures/{request_id}/json",
    ):
        resp = await client.get(bad)
        assert resp.status in (400, 404), bad  # 400: a target the proxy refuses outright
        assert b"a capture" not in await resp.read()
    # the same admin rules as every own endpoint
    refused = await client.get(
        f"/_sseproxy/{d['capture']['sidecar']}", headers={"Host": "evil.example"}
    )
    assert refused.status == 421


def test_the_store_remembers_a_bounded_number_of_captures(tmp_path: Path, monkeypatch) -> None:
    import sseproxy.capture.store as capture

    monkeypatch.setattr(capture, "MAX_SAVED_NAMES", 2)
    store = CaptureStore(CaptureSettings(tmp_path))
    for request_id in ("a", "b", "c"):  # one more than the bound
        cap = store.new(request_id, 0.0)
        cap.chunk(b"data: x\n\n", 0.001)
        store._write(cap, {"content_encoding": None}, capture.Secrets())
    assert store.files_of("a") is None
    assert store.files_of("b") is not None and store.files_of("c") is not None


async def test_anomalies_are_marked_on_the_event_they_concern(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    body = sse(chat_chunk("Hi"), "{not json", chat_chunk(finish="stop"), "[DONE]")
    fake.script("/v1/chat/completions", Script([Send(body)]))
    client = await make_proxy(keep_content=True)
    record, _ = await one(client, logs, "/v1/chat/completions")
    assert record["anomalies"].get("json_decode_error") == 1
    d = await detail(client, record["request_id"])
    marked = [(e["data"], e["anomalies"]) for e in d["events"] if e["anomalies"]]
    assert marked == [("{not json", ["json_decode_error"])]
