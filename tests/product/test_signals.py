"""The installed command stopped as processes are stopped: SIGTERM (docker stop, systemd,
Kubernetes) with a stream and a session open, and SIGKILL in the middle of a capture. Each test
starts a process of its own, since it ends it."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import websockets

from tests.product.conftest import Launch
from tests.product.fake_provider import HELD_CHAT_EVENTS, FakeProvider
from tests.product.proxy_process import installed_command

pytestmark = pytest.mark.product
# Seconds for what a healthy proxy does at once; generous, for a loaded machine.
WAIT = 20.0
# What `sseproxy replay` exits with when the capture holds only part of the stream.
EXIT_PARTIAL = 3
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=120)


def held(kind: str = "hold") -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def chat_request(name: str) -> dict[str, Any]:
    return {"model": name, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def read_events(response: aiohttp.ClientResponse, n: int) -> bytes:
    """The body until it holds `n` whole events."""
    data = b""
    async with asyncio.timeout(WAIT):
        while data.count(b"\n\n") < n:
            chunk = await response.content.readany()
            assert chunk, f"the stream ended after {data!r}"
            data += chunk
    return data


async def read_rest(response: aiohttp.ClientResponse) -> bytes:
    """Whatever comes until the proxy ends the body, cleanly or not."""
    data = b""
    try:
        async with asyncio.timeout(60):
            while chunk := await response.content.readany():
                data += chunk
    except aiohttp.ClientError:
        pass
    return data


async def test_sigterm_with_an_open_stream_and_an_open_session(
    launch: Launch, fake: FakeProvider
) -> None:
    """SIGTERM while a Chat stream and a Realtime session are open, neither ending by itself:
    the session is closed with 1001 (going away) on both sides, the stream is cut when the
    grace period ends, every record is on stdout before the process exits, and it exits 0."""
    proxy = launch()
    stream_model, session_model = held(), held()
    closed: websockets.ConnectionClosed | None = None
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
        url = proxy.url + "/v1/chat/completions"
        async with http.post(url, json=chat_request(stream_model)) as response:
            assert response.status == 200
            await read_events(response, len(HELD_CHAT_EVENTS))
            ws_url = f"ws{proxy.url[4:]}/v1/realtime?model={session_model}"
            async with asyncio.timeout(2 * WAIT), websockets.connect(ws_url) as ws:
                assert json.loads(await ws.recv())["type"] == "session.created"
                await ws.send(json.dumps({"type": "response.create"}))
                assert json.loads(await ws.recv())["type"] == "response.created"
                assert json.loads(await ws.recv())["type"] == "response.output_text.delta"
                proxy.send(signal.SIGTERM)
                try:
                    while True:
                        await ws.recv()
                except websockets.ConnectionClosed as exc:
                    closed = exc
            await read_rest(response)
    code = await proxy.wait_exit()
    assert code == 0, proxy.output_tail()
    # Read only now: all of it was written before the process exited.
    [stream] = await proxy.wait_records(lambda r: r.get("model") == stream_model, timeout=0)
    assert (stream["state"], stream["interruption"]["reason"]) == (
        "interrupted",
        "proxy_shutdown",
    )
    [turn] = await proxy.wait_records(lambda r: r.get("model") == session_model, timeout=0)
    [session] = await proxy.wait_records(
        lambda r: r["event"] == "session.finished" and r.get("session_id") == turn["session_id"],
        timeout=0,
    )
    assert (turn["state"], turn["interruption"]["reason"]) == ("interrupted", "proxy_shutdown")
    assert (session["close_code"], session["closed_by"]) == (1001, "proxy"), session
    assert closed is not None and closed.rcvd is not None, closed
    assert closed.rcvd.code == 1001, f"the client got {closed.rcvd}"
    upstream = await asyncio.to_thread(fake.session, session_model)
    assert upstream.close_code == 1001, f"the upstream got {upstream.close_code}"


def sidecars(folder: Path) -> list[Path]:
    return [p for p in folder.glob("*.json") if not p.name.startswith(".")]


def body_bytes(folder: Path) -> int:
    files = folder.iterdir()
    return sum(p.stat().st_size for p in files if p.suffix != ".json" and p.name[0] != ".")


async def test_sigkill_during_a_capture_leaves_a_partial_capture(
    launch: Launch, tmp_path: Path
) -> None:
    """SIGKILL (the OOM killer, a second `docker kill`) while a captured stream is open: the
    capture on disk holds the events received so far, and `sseproxy replay` says it is
    unfinished and exits 3."""
    folder = tmp_path / "captures"
    folder.mkdir()
    proxy = launch(["--capture", str(folder)])
    name = held()
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
        url = proxy.url + "/v1/chat/completions"
        async with http.post(url, json=chat_request(name)) as response:
            received = await read_events(response, len(HELD_CHAT_EVENTS))
            # The capture is streamed to disk: give it time to hold what the client has.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (
                sidecars(folder) and body_bytes(folder) >= len(received)
            ):
                await asyncio.sleep(0.05)
            proxy.proc.kill()
            assert await proxy.wait_exit(WAIT) == -signal.SIGKILL
    found = sidecars(folder)
    assert len(found) == 1, (
        f"no capture on disk after SIGKILL mid-stream: {sorted(folder.iterdir())}"
    )
    replay = await asyncio.to_thread(
        subprocess.run,
        [str(installed_command()), "replay", "--events", str(found[0])],
        capture_output=True,
        timeout=60,
        check=False,
    )
    output = (replay.stdout + replay.stderr).decode()
    assert replay.returncode == EXIT_PARTIAL, output
    assert "partial" in output.lower() or "unfinished" in output.lower(), output
    lines = [json.loads(line) for line in replay.stdout.decode().splitlines()]
    events = [json.loads(line["data"]) for line in lines if set(line) == {"type", "data", "id"}]
    assert events == list(HELD_CHAT_EVENTS), output
    assert lines[-1]["events"] == len(HELD_CHAT_EVENTS), output  # the verdict, of those events
