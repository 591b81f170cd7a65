"""The fault matrix. For every fault: (a) the client got exactly the upstream bytes up to the
fault, (b) one record names it, (c) the next request is served normally, (d) nothing leaks."""

from __future__ import annotations

import asyncio
import gzip
import os
import ssl
import subprocess
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from sseproxy.config import load
from sseproxy.shell.app import create_app
from tests.integration.fake_upstream import Close, Reset, Script, Send, Sleep
from tests.integration.raw_upstream import RawScript, RawUpstream
from tests.streams import sse

PATH = "/v1/chat/completions"


def chunk(content: str | None = None, finish: str | None = None) -> dict:
    delta = {"content": content} if content is not None else {}
    return {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


HELLO = sse(chunk("Hello "), chunk("wörld ✓"))
END = sse(chunk(finish="stop"), "[DONE]")
NORMAL = RawScript([Send(HELLO), Send(END)])


@dataclass
class Fault:
    name: str
    script: RawScript
    state: str
    reason: str | None = None
    client_error: bool = True  # the client must see the break
    settings: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    anomalies: tuple[str, ...] = ()
    settle: float = 0.0  # seconds before the next request (see the fault that uses it)


MID_UTF8 = HELLO + b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"\xe4\xb8'
MID_JSON = HELLO + b'data: {"id":"c1","choices":[{"ind'
FAULTS = [
    Fault("rst_after_headers", RawScript([Reset()]), "interrupted", "upstream_reset"),
    Fault(
        "close_mid_event",
        RawScript([Send(HELLO + b"data: {"), Close()]),
        "interrupted",
        "upstream_closed",
        record={"interruption": {"reason": "upstream_closed", "partial_event_bytes": 7}},
    ),
    Fault(
        "close_mid_utf8_char",
        RawScript([Send(MID_UTF8), Close()]),
        "interrupted",
        "upstream_closed",
        record={"text_chars": 13},
    ),
    Fault(
        "close_mid_json",
        RawScript([Send(MID_JSON), Close()]),
        "interrupted",
        "upstream_closed",
        record={"last_event": "chunk", "events": 2},
    ),
    Fault(
        "rst_mid_stream",
        RawScript([Send(HELLO), Sleep(0.05), Reset()]),
        "interrupted",
        "upstream_reset",
    ),
    Fault(
        "stall_past_idle_timeout",
        RawScript([Send(HELLO), Sleep(3)]),
        "interrupted",
        "idle_timeout",
        settings={"idle_timeout": 0.3},
    ),
    Fault(
        "keepalives_outlive_idle_timeout",
        RawScript(
            [
                *[s for _ in range(5) for s in (Sleep(0.2), Send(b": keep-alive\n\n"))],
                Send(HELLO),
                Send(END),
            ]
        ),
        "completed",
        client_error=False,
        settings={"idle_timeout": 0.8},  # < the 1 s of keep-alives only, > each gap
        record={"comments": 5},
    ),
    Fault(
        "invalid_utf8",
        RawScript(
            [
                Send(
                    sse(chunk("ok"))
                    + b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"\xff"},"finish_reason":null}]}\n\n'
                ),
                Send(END),
            ]
        ),
        "completed",
        client_error=False,
        anomalies=("invalid_utf8",),
    ),
    Fault(
        "http10_close_delimited",
        RawScript([Send(HELLO), Send(END)], framing="http10"),
        "completed",
        client_error=False,
    ),
    Fault(
        "http10_close_delimited_cut",
        RawScript([Send(HELLO)], framing="http10"),
        "interrupted",
        "upstream_closed",
        client_error=False,
    ),
    # The stray bytes come after a pause, then the server hangs up; the next request waits
    # for that hang-up to reach the pool. (Stray bytes in the same read as the headers make
    # aiohttp reject the whole response: the client then gets a 502 naming it.)
    Fault(
        "content_length_shorter_than_body",
        RawScript([Send(HELLO), Sleep(0.05), Send(END), Close()], framing=f"length:{len(HELLO)}"),
        "interrupted",
        "upstream_closed",
        client_error=False,
        settle=0.2,
    ),
    Fault(
        "content_length_longer_than_body",
        RawScript([Send(HELLO), Close()], framing=f"length:{len(HELLO) + 50}"),
        "interrupted",
        "upstream_closed",
    ),
    Fault(
        "ten_megabyte_line",
        RawScript([Send(b"data: " + b"x" * (10 * 1024 * 1024) + b"\n\n"), Send(HELLO), Send(END)]),
        "completed",
        client_error=False,
        settings={"max_event_bytes": 1024 * 1024},
        anomalies=("oversized_event",),
    ),
    Fault(
        "hundred_thousand_tiny_events",
        RawScript([Send(b"data: {}\n\n" * 100_000), Send(HELLO), Send(END)]),
        "completed",
        client_error=False,
        record={"events": 100_004},
    ),
    Fault(
        "corrupt_gzip",
        RawScript(
            [
                Send(
                    gzip.compress(HELLO + END)[:20]
                    + b"\x00garbage"
                    + gzip.compress(HELLO + END)[20:]
                )
            ],
            headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"},
        ),
        "unconfirmed",
        client_error=False,
        anomalies=("content_decoding_error",),
    ),
]


def expected_body(script: RawScript) -> bytes:
    body = b"".join(s.data for s in script.steps if isinstance(s, Send))
    if script.framing.startswith("length:"):
        body = body[: int(script.framing[7:])]
    return body


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def proxy_tasks() -> int:
    """Tasks alive in the loop, minus the scripted upstream's own (it sleeps through stalls)."""
    return sum(1 for t in asyncio.all_tasks() if "RawUpstream" not in repr(t.get_coro()))


@pytest.fixture
async def raw_upstream():
    up = RawUpstream()
    await up.start()
    yield up
    await up.stop()


async def fetch(session: aiohttp.ClientSession, url: str) -> tuple[bytes, BaseException | None]:
    got = b""
    try:
        async with session.post(url + PATH, json={"stream": True}, auto_decompress=False) as resp:
            async for data in resp.content.iter_any():
                got += data
    except aiohttp.ClientError as exc:
        return got, exc
    return got, None


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
async def test_fault(fault: Fault, raw_upstream, aiohttp_server, logs) -> None:
    settings = load(None, {}, {"upstream": raw_upstream.url, **fault.settings})
    server = await aiohttp_server(create_app(settings))
    url = str(server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as session:
        raw_upstream.script = NORMAL
        await fetch(session, url)  # warm the pools, so the counts below compare like with like
        fds, tasks = open_fds(), proxy_tasks()
        for round_ in range(2):
            raw_upstream.script = fault.script
            got, error = await fetch(session, url)
            assert got == expected_body(fault.script)  # (a) exactly the bytes, up to the fault
            assert (error is not None) == fault.client_error, error
            record = (await logs.wait(2 + 2 * round_))[-1]
            assert record["state"] == fault.state  # (b) one record naming the fault
            if fault.reason:
                assert record["interruption"]["reason"] == fault.reason
            for key, value in fault.record.items():
                assert record[key] == value
            for anomaly in fault.anomalies:
                assert anomaly in record["anomalies"]
            raw_upstream.script = NORMAL
            await asyncio.sleep(fault.settle)
            got, error = await fetch(session, url)  # (c) the next request is normal
            assert (got, error) == (HELLO + END, None), got[:300]
            assert (await logs.wait(3 + 2 * round_))[-1]["state"] == "completed"
        await asyncio.sleep(0.05)
        assert len(logs.records()) == 5  # exactly one record per request
        assert open_fds() <= fds + 2  # (d) no sockets or files left behind
        assert proxy_tasks() <= tasks


async def test_upstream_refused(aiohttp_server, logs, unused_tcp_port) -> None:
    server = await aiohttp_server(
        create_app(load(None, {}, {"upstream": f"http://127.0.0.1:{unused_tcp_port}"}))
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(str(server.make_url(PATH)), json={}) as resp,
    ):
        assert resp.status == 502
        assert "Connect" in (await resp.json())["error"]["message"]
    record = (await logs.wait(1))[-1]
    assert (record["state"], record["interruption"]["reason"]) == (
        "http_error",
        "upstream_unreachable",
    )


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


async def test_upstream_tls_failure(self_signed, aiohttp_server, logs) -> None:
    cert, key = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    tls_server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
    port = tls_server.sockets[0].getsockname()[1]
    try:
        server = await aiohttp_server(
            create_app(load(None, {}, {"upstream": f"https://127.0.0.1:{port}"}))
        )
        async with (
            aiohttp.ClientSession() as session,
            session.post(str(server.make_url(PATH)), json={}) as resp,
        ):
            assert resp.status == 502
            message = (await resp.json())["error"]["message"]
        assert "certificate" in message.lower() or "ssl" in message.lower()
        record = (await logs.wait(1))[-1]
        assert (record["state"], record["interruption"]["reason"]) == (
            "http_error",
            "upstream_unreachable",
        )
    finally:
        tls_server.close()


async def test_client_reset_mid_stream_closes_upstream(raw_upstream, aiohttp_server, logs) -> None:
    raw_upstream.script = RawScript([Send(HELLO), Sleep(5), Send(END)])
    server = await aiohttp_server(create_app(load(None, {}, {"upstream": raw_upstream.url})))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode())
    await writer.drain()
    await reader.readuntil(b"Hello")
    writer.transport.abort()  # the app dies mid-stream
    record = (await logs.wait(1))[-1]
    assert (record["state"], record["interruption"]["reason"]) == (
        "cancelled",
        "client_disconnected",
    )
    assert record["duration_ms"] < 4000  # the upstream was not waited for


async def test_slow_client_back_pressure_reaches_the_upstream(upstream, make_proxy, logs) -> None:
    """A client that stops reading stalls the upstream writer: the proxy does not buffer."""
    fake, _ = upstream
    block = b"data: " + b"y" * 65_530 + b"\n\n"
    fake.script(PATH, Script([Send(block)] * 800))  # 52 MB
    client = await make_proxy()
    resp = await client.post(PATH, json={})
    await resp.content.readexactly(1024)
    await asyncio.sleep(0.5)  # the client reads nothing for a while
    assert not fake.finished[PATH].is_set()  # so the upstream cannot push everything out
    total = 1024 + len(await resp.read())
    assert total == len(block) * 800
    record = (await logs.wait(1))[-1]
    assert record["bytes"] == total
