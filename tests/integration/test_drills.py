"""Drills through the live proxy and through `sseproxy mock`: faults chosen per request, the
record marked `injected`, the verdict computed on what the client received."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from sseproxy.core.inject import InjectionDisabled
from sseproxy.shell import admission
from sseproxy.tools.mock import MOCK_HEADER, MockServer, load_recordings
from tests.integration.conftest import captured as capture_of
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk as chat
from tests.streams import sse

PATH = "/v1/chat/completions"


STREAM = sse(chat("Grüß"), chat(" Gott"), chat(" 世界"), chat(finish="stop"), "[DONE]")


async def read_chunks(resp) -> tuple[list[bytes], BaseException | None]:
    chunks = []
    try:
        async for chunk in resp.content.iter_any():
            chunks.append(chunk)
    except aiohttp.ClientPayloadError as exc:
        return chunks, exc
    return chunks, None


async def test_rechunk_reaches_the_client_one_byte_at_a_time(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy(allow_inject=True)
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "rechunk=1,delay=1"})
    chunks, error = await read_chunks(resp)
    assert error is None and b"".join(chunks) == STREAM
    assert max(len(c) for c in chunks) <= 4  # the client's reads follow the 1-byte writes
    [record] = await logs.wait()
    assert (record["state"], record["injected"]) == ("completed", ["rechunk=1", "delay=1"])
    assert "x-sseproxy-inject" not in {k.lower() for k in fake.seen[0].headers}


async def test_cut_after_breaks_the_client_and_says_so(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy(allow_inject=True)
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "cut-after=2"})
    chunks, error = await read_chunks(resp)
    assert error is not None
    assert b"".join(chunks) == b"".join(e + b"\n\n" for e in STREAM.split(b"\n\n")[:2])
    [record] = await logs.wait()
    assert (record["state"], record["injected"]) == ("interrupted", ["cut-after=2"])
    assert record["interruption"]["reason"] == "upstream_closed"
    assert record["bytes"] == len(b"".join(chunks))  # the verdict is on what the client got


async def test_done_after_cut_and_inject_error(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy(allow_inject=True)
    for rule, state in (("done-after-cut=1", "unconfirmed"), ("inject-error=2", "failed")):
        resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": rule})
        _, error = await read_chunks(resp)
        assert error is None  # both end the HTTP body cleanly: only the record tells
        assert (await logs.wait(1))[-1]["state"] == state
        logs.stream.truncate(0)
        logs.stream.seek(0)


async def test_injection_needs_the_config(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy()
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "cut-after=1"})
    assert resp.status == 403
    assert "--allow-inject" in (await resp.json())["error"]["message"]
    assert fake.seen == []
    client = await make_proxy(allow_inject=True)
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "explode"})
    assert resp.status == 400


async def test_the_status_follows_the_refusals_type_not_its_words(
    upstream, make_proxy, logs, monkeypatch
) -> None:
    """A rule the request got wrong is 400 even when its text says "disabled"; a refusal is
    403 whatever its text says."""
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy(allow_inject=True)
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "disabled"})
    assert resp.status == 400
    assert "'disabled'" in (await resp.json())["error"]["message"]

    def refuse(*_: object) -> tuple[()]:
        raise InjectionDisabled("drills are off on this route")

    monkeypatch.setattr(admission, "injection_rules", refuse)
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "cut-after=1"})
    assert resp.status == 403
    assert fake.seen == []


async def test_the_mocks_status_follows_the_refusals_type_not_its_words(
    tmp_path: Path, aiohttp_client, monkeypatch
) -> None:
    (tmp_path / "plain.sse").write_bytes(sse(chat("x"), chat(finish="stop"), "[DONE]"))
    mock = MockServer(load_recordings([tmp_path]), speed=0, allow_inject=True)
    client = await aiohttp_client(mock.app())
    resp = await client.post(PATH, headers={"x-sseproxy-inject": "disabled"})
    assert resp.status == 400

    def refuse(*_: object) -> tuple[()]:
        raise InjectionDisabled("drills are off")

    monkeypatch.setattr(MockServer, "_header_rules", refuse)
    resp = await client.post(PATH, headers={"x-sseproxy-inject": "cut-after=1"})
    assert resp.status == 403
    assert (await resp.json())["error"]["message"] == "drills are off"


async def test_config_rules_apply_without_a_header(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy(inject="drop-terminal")
    body = await (await client.post(PATH, json={})).read()
    assert b"[DONE]" not in body and b'finish_reason":"stop' not in body.replace(b" ", b"")
    [record] = await logs.wait()
    assert record["injected"] == ["drop-terminal"]
    assert record["state"] == "interrupted"  # as the drills table says: no terminal, ever


async def test_mock_serves_captures_with_their_chunking(
    upstream, make_proxy, logs, tmp_path: Path, aiohttp_client
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM[:40]), Send(STREAM[40:])]))
    client = await make_proxy(capture_dir=str(tmp_path))
    await (await client.post(PATH, json={})).read()
    await logs.wait(1)
    await capture_of(client, tmp_path)
    (tmp_path / "plain.sse").write_bytes(sse(chat("x"), chat(finish="stop"), "[DONE]"))
    mock = MockServer(load_recordings([tmp_path]), speed=0, allow_inject=True)
    names = [r.name for r in mock.recordings]
    mock_client = await aiohttp_client(mock.app())
    captured = next(n for n in names if n != "plain")
    resp = await mock_client.post(PATH, headers={MOCK_HEADER: captured})
    assert await resp.read() == STREAM
    resp = await mock_client.post(
        PATH, headers={MOCK_HEADER: "plain", "x-sseproxy-inject": "cut-after=1"}
    )
    chunks, error = await read_chunks(resp)
    assert error is not None and b"".join(chunks).count(b"data:") == 1
    unknown = await mock_client.post(PATH, headers={MOCK_HEADER: "nope"})
    assert unknown.status == 404 and set(names) <= set((await unknown.json())["error"]["streams"])
    seen = {await (await mock_client.post(PATH)).read() for _ in range(2)}
    assert len(seen) == 2  # round-robin over the streams of the dialect


@pytest.mark.e2e
async def test_openai_sdk_through_drills(upstream, make_proxy, logs) -> None:
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy(allow_inject=True)
    base = str(client.make_url("/v1"))

    async def text_with(rule: str | None):
        headers = {"x-sseproxy-inject": rule} if rule else {}
        sdk = openai.AsyncOpenAI(base_url=base, api_key="k", max_retries=0, default_headers=headers)
        stream = await sdk.chat.completions.create(model="m", messages=[], stream=True)
        text, finish = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        await sdk.close()
        return text, finish

    plain = await text_with(None)
    assert plain == ("Grüß Gott 世界", "stop")
    assert await text_with("rechunk=1") == plain
    assert await text_with("split-utf8") == plain
    try:
        cut = await text_with("cut-after=2")
    except (openai.APIError, httpx.TransportError):  # openai<3.14 let httpx's error through
        cut = None
    assert cut is None or cut[1] is None  # raised, or ended short with no finish reason
    last = (await logs.wait(4))[-1]
    assert (last["state"], last["injected"]) == ("interrupted", ["cut-after=2"])


async def test_stall_after_goes_silent_until_the_idle_timeout(upstream, make_proxy, logs) -> None:
    """`stall-after=1`: the first event, then nothing; the idle timeout ends it, as it would a
    real stalled upstream, and the upstream request was closed at once (no more generation)."""
    fake, _ = upstream
    fake.script(PATH, Script([Send(STREAM)]))
    client = await make_proxy(allow_inject=True, idle_timeout=0.3)
    resp = await client.post(PATH, json={}, headers={"x-sseproxy-inject": "stall-after=1"})
    chunks, error = await read_chunks(resp)
    first_event = STREAM[: STREAM.index(b"\n\n") + 2]
    assert (b"".join(chunks), error is not None) == (first_event, True)
    [record] = await logs.wait(1)
    assert (record["state"], record["interruption"]["reason"]) == ("interrupted", "idle_timeout")
    assert (record["injected"], record["events"], record["http_complete"]) == (
        ["stall-after=1"],
        1,
        False,
    )
