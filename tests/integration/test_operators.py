"""Operators' features: Prometheus metrics and capture to disk (with replay of a capture)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sseproxy.config import load
from sseproxy.observe.metrics import IMPOSSIBLE_FIELDS
from sseproxy.shell.app import STATE, create_app
from sseproxy.tools.replay import ReplayOptions, replay
from tests.integration.conftest import captured
from tests.integration.fake_upstream import Close, Script, Send, Sleep
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"


def chunk(content=None, finish=None) -> dict:
    return chat_chunk(content, finish, response_id="c")


USAGE = {
    "id": "c",
    "choices": [],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
}
COMPLETE = sse(chunk("Hi"), chunk(finish="stop"), USAGE, "[DONE]")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_exposition(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    cut = b'event: message_start\ndata: {}\n\nevent: ping\ndata: {"ty'
    fake.script("/v1/messages", Script([Send(cut), Close()]))
    client = await make_proxy(metrics_models="gpt-known")
    for model in ("gpt-known", "unlisted-model"):
        await (await client.post(PATH, json={"model": model})).read()
    with pytest.raises(aiohttp.ClientPayloadError):  # the cut reaches the client
        await (await client.post("/v1/messages", json={"model": "claude"})).read()
    await logs.wait(3)
    text = await (await client.get("/_sseproxy/metrics")).text()
    got = samples(text)
    ok = (
        ("dialect", "openai-chat"),
        ("finish_category", "stop"),
        ("route", "upstream"),
        ("state", "completed"),
        ("status_class", "2xx"),
    )
    assert got[("sseproxy_requests_total", tuple(sorted((*ok, ("model", "gpt-known")))))] == 1
    assert got[("sseproxy_requests_total", tuple(sorted((*ok, ("model", "other")))))] == 1
    cut = [
        k
        for k, v in got.items()
        if k[0] == "sseproxy_requests_total" and ("state", "interrupted") in k[1] and v
    ]
    assert len(cut) == 1 and got[cut[0]] == 1
    anthropic = {("route", "upstream"), ("dialect", "anthropic-messages"), ("model", "other")}
    partial = tuple(sorted({*anthropic, ("anomaly", "partial_event_discarded")}))
    assert got[("sseproxy_anomalies_total", partial)] == 1
    for model, requests in (("gpt-known", 1), ("other", 1)):
        chat = {("route", "upstream"), ("dialect", "openai-chat"), ("model", model)}
        openai_input = tuple(sorted({*chat, ("kind", "input_uncached")}))
        assert got[("sseproxy_tokens_total", openai_input)] == 7 * requests
        assert got[("sseproxy_ttft_seconds_count", tuple(sorted(chat)))] == requests
        bytes_key = ("sseproxy_upstream_bytes_total", tuple(sorted(chat)))
        assert got[bytes_key] == requests * len(COMPLETE)
    assert got[("sseproxy_active_streams", ())] == 0
    labels = {v for k in got for _, v in k[1]}
    assert "unlisted-model" not in labels  # label values stay bounded


async def test_the_startup_exposition_is_small(aiohttp_client) -> None:
    """With the default config and before any request: about 1,082,600 bytes (7,729 samples, 3,388
    of them `*_created`) before series were created when first used; now a few kB. What the
    alerts need at zero is there: the impossible-values counters."""
    client = await aiohttp_client(create_app(load(None, {}, {})))
    body = await (await client.get("/_sseproxy/metrics")).read()
    assert len(body) <= 150_000, len(body)
    assert b"_created" not in body
    got = samples(body.decode())
    for field in IMPOSSIBLE_FIELDS:
        assert got[("sseproxy_impossible_values_total", (("field", field),))] == 0
    assert got[("sseproxy_active_streams", ())] == 0


async def test_a_rare_state_is_visible_to_increase(upstream, make_proxy, logs) -> None:
    """After the first request of a route, dialect and model, the series of its rare
    outcomes exist at zero, so a scraper sees 0 then 1 (an increase), not a series born
    holding 1."""
    fake, _ = upstream
    busy = b'{"error":{"message":"busy"}}'
    client = await make_proxy()
    fake.script(PATH, Script([Send(COMPLETE)]))
    await (await client.post(PATH, json={"model": "m"})).read()
    await logs.wait(1)
    fake.script(
        PATH, Script([Send(busy)], status=503, headers={"Content-Type": "application/json"})
    )
    key = (
        "sseproxy_requests_total",
        tuple(
            sorted(
                {
                    "route": "upstream",
                    "dialect": "openai-chat",
                    "state": "http_error",
                    "finish_category": "error",
                    "status_class": "5xx",
                    "model": "other",
                }.items()
            )
        ),
    )
    before = samples(await (await client.get("/_sseproxy/metrics")).text())
    assert before[key] == 0
    await (await client.post(PATH, json={"model": "m"})).read()
    await logs.wait(2)
    after = samples(await (await client.get("/_sseproxy/metrics")).text())
    assert after[key] == 1, [k for k, v in after.items() if v and "requests" in k[0]]


async def test_openmetrics_and_gzip_when_the_scraper_asks(make_proxy) -> None:
    client = await make_proxy()
    resp = await client.get(
        "/_sseproxy/metrics",
        headers={
            "Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
            "Accept-Encoding": "gzip",
        },
    )
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
    assert resp.headers["Content-Encoding"] == "gzip"
    body = await resp.read()  # aiohttp decompresses
    assert body.endswith(b"# EOF\n") and b"sseproxy_build_info" in body
    plain = await client.get("/_sseproxy/metrics")
    assert plain.headers["Content-Type"].startswith("text/plain")


async def test_capture_and_replay(upstream, make_proxy, logs, tmp_path: Path) -> None:
    fake, _ = upstream
    cut = sse(chunk("Hel"), chunk("lo")) + b'data: {"id":"c","cho'
    pause = Sleep(0.05)  # so that each write arrives as its own read
    fake.script(
        PATH,
        Script([Send(cut[:10]), pause, Send(cut[10:60]), pause, Send(cut[60:]), pause, Close()]),
    )
    client = await make_proxy(capture_dir=str(tmp_path))
    resp = await client.post(
        PATH + "?key=secret-query",
        json={"model": "m", "api_key": "body-secret"},
        headers={"Authorization": "Bearer sk-secret-123456"},
    )
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    [record] = await logs.wait(1)
    sidecar_path, sidecar, body = await captured(client, tmp_path)
    assert body == cut
    assert [c[1] for c in sidecar["chunks"]] == [10, 50, len(cut) - 60]
    assert sidecar["verdict"]["state"] == "interrupted" == record["state"]
    assert sidecar["request_body_base64"] is None  # prompts only with capture_request_bodies
    everything = sidecar_path.read_text() + json.dumps(record)
    for secret in ("secret-query", "body-secret", "sk-secret-123456"):
        assert secret not in everything
    out = io.StringIO()
    assert replay(body, ReplayOptions(), out, capture=sidecar) == 1
    replayed = json.loads(out.getvalue().splitlines()[-1])
    assert replayed == sidecar["verdict"]


async def test_capture_directory_is_capped(upstream, make_proxy, logs, tmp_path: Path) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy(capture_dir=str(tmp_path), capture_max_total_bytes=6000)
    for _ in range(10):
        await (await client.post(PATH, json={})).read()
    await logs.wait(10)
    captures = client.app[STATE].captures
    assert captures is not None
    await captures.drain()  # every capture written (and the directory trimmed) in a thread
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert total <= 6000
    assert list(tmp_path.glob("*.json"))  # the newest survive
