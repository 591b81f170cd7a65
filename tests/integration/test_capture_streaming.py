"""A capture is written as the stream goes: while a response streams, its sidecar (marked
`complete: false`) and the body received so far are on disk, so a proxy killed mid-stream
leaves a partial capture that `sseproxy replay` reports as such (exit 3, capture_unfinished).
(Before: every file was written when the stream ended; a SIGKILL left nothing.)"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sseproxy.capture.format import load_capture
from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Script, Send, WaitFor
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
KEY = "sk-proj-" + "Q7" * 20  # a credential the client sends, 48 characters


def sseproxy_command() -> str:
    """The installed `sseproxy` script: the one beside this interpreter, else on PATH."""
    beside = Path(sys.executable).with_name("sseproxy")
    found = str(beside) if beside.is_file() else shutil.which("sseproxy")
    assert found, "the sseproxy script is not installed"
    return found


async def read_exactly(response: aiohttp.ClientResponse, n: int) -> bytes:
    got = b""
    async with asyncio.timeout(10):
        while len(got) < n:
            piece = await response.content.readany()
            assert piece, f"the stream ended after {len(got)} of {n} bytes"
            got += piece
    return got


def files(folder: Path) -> tuple[dict[str, Any], bytes]:
    [sidecar_path] = folder.glob("*.json")
    return load_capture(sidecar_path)


async def test_the_files_hold_the_first_chunk_while_the_stream_is_still_open(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    first = sse(chat_chunk("Hello"))
    last = sse(chat_chunk(" world", finish="stop"), "[DONE]")
    gate = asyncio.Event()
    fake.script(PATH, Script([Send(first), WaitFor(gate), Send(last)]))
    client = await make_proxy(capture_dir=str(tmp_path))
    store = client.app[STATE].captures
    response = await client.post(PATH, json={"stream": True, "model": "m"})
    assert await read_exactly(response, len(first)) == first
    await store.drain()  # the chunk was queued before the client got it: now it is on disk
    sidecar, body = files(tmp_path)
    assert body == first  # no credential in this request: nothing held back
    assert sidecar["complete"] is False
    assert (sidecar["method"], sidecar["path"], sidecar["status"]) == ("POST", PATH, 200)
    assert sidecar["dialect"] == "openai-chat"
    assert sidecar["response_headers"]["Content-Type"] == "text/event-stream"
    assert sidecar["chunks"] == []
    assert not {"verdict", "record", "end", "body_bytes"} & set(sidecar)
    gate.set()
    assert await response.read() == last
    [record] = await logs.wait()
    await store.drain()
    sidecar, body = files(tmp_path)
    assert body == first + last
    assert sidecar["complete"] is True
    assert sidecar["verdict"]["state"] == "completed"
    assert sidecar["record"]["request_id"] == record["request_id"]
    assert [size for _, size, _ in sidecar["chunks"]] == [len(first), len(last)]
    assert sidecar["body_bytes"] == len(first + last)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


async def test_a_credential_split_across_two_chunks_is_held_back_then_masked(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    head = b'data: {"choices":[{"index":0,"delta":{"content":"your key is '
    first = head + KEY[:20].encode()
    second = KEY[20:].encode() + b'"}}]}\n\n' + sse(chat_chunk(finish="stop"), "[DONE]")
    gate = asyncio.Event()
    fake.script(PATH, Script([Send(first), WaitFor(gate), Send(second)]))
    client = await make_proxy(capture_dir=str(tmp_path))
    store = client.app[STATE].captures
    auth = {"Authorization": f"Bearer {KEY}"}
    response = await client.post(PATH, json={"stream": True}, headers=auth)
    assert await read_exactly(response, len(first)) == first
    await store.drain()
    _, body = files(tmp_path)
    # The key's first 20 bytes could be the start of a credential: they wait for the next
    # chunk; everything before them is on disk already.
    assert body == head
    gate.set()
    assert await response.read() == second  # the client gets every byte as it came
    await logs.wait()
    await store.drain()
    sidecar, body = files(tmp_path)
    assert body == head + b"*" * len(KEY) + second[len(KEY) - 20 :]
    assert len(body) == len(first + second) == sidecar["body_bytes"]
    assert KEY[:12].encode() not in body and KEY[-12:].encode() not in body


async def test_a_compressed_body_is_kept_off_the_body_file_until_its_end(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    import zlib

    fake, _ = upstream
    packer = zlib.compressobj(wbits=31)  # gzip, flushed per event as a server streams it
    first = packer.compress(sse(chat_chunk("Hi"))) + packer.flush(zlib.Z_SYNC_FLUSH)
    last = packer.compress(sse(chat_chunk(finish="stop"), "[DONE]")) + packer.flush()
    gate = asyncio.Event()
    headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
    fake.script(PATH, Script([Send(first), WaitFor(gate), Send(last)], headers=headers))
    client = await make_proxy(capture_dir=str(tmp_path))
    store = client.app[STATE].captures
    auth = {"Authorization": f"Bearer {KEY}", "Accept-Encoding": "gzip"}
    response = await client.post(PATH, json={"stream": True}, headers=auth, auto_decompress=False)
    assert await read_exactly(response, len(first)) == first
    await store.drain()
    sidecar, body = files(tmp_path)
    # It cannot be masked in place: nothing of it is in a named file until it is searched
    # whole (an unnamed temporary file holds it meanwhile; the kernel frees it on a kill).
    assert body == b""
    assert sidecar["complete"] is False
    assert sidecar["body_deferred"].startswith("gzip body:")
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".body", ".json"]
    gate.set()
    assert await response.read() == last
    await logs.wait()
    await store.drain()
    sidecar, body = files(tmp_path)
    assert body == first + last  # it holds no credential: kept as it came, compressed
    assert "body_deferred" not in sidecar and "body_withheld" not in sidecar


async def test_replay_of_the_files_taken_mid_stream_says_partial_unfinished(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    events = sse(chat_chunk("Hel"), chat_chunk("lo"))
    gate = asyncio.Event()
    fake.script(PATH, Script([Send(events), WaitFor(gate), Send(sse("[DONE]"))]))
    live = tmp_path / "live"
    client = await make_proxy(capture_dir=str(live))
    response = await client.post(PATH, json={"stream": True})
    assert await read_exactly(response, len(events)) == events
    await client.app[STATE].captures.drain()
    copy = tmp_path / "copy"  # the files as a kill at this moment would leave them
    shutil.copytree(live, copy)
    gate.set()
    await response.read()
    await logs.wait()
    [sidecar_path] = copy.glob("*.json")
    result = await asyncio.to_thread(replay, sidecar_path)
    assert result.returncode == 3, result.stderr
    assert "partial capture" in result.stderr and "capture_unfinished" in result.stderr
    verdict = json.loads(result.stdout.splitlines()[-1])
    assert verdict["partial_capture"] == {
        "truncated_at": len(events),
        "reason": "capture_unfinished",
    }
    assert (verdict["events"], verdict["text_chars"]) == (2, 5)
    assert verdict["state"] != "completed"


def replay(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sseproxy_command(), "replay", str(path)], capture_output=True, text=True, timeout=60
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the proxy exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_sseproxy/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the proxy did not start")


def body_reaches(folder: Path, size: int) -> bool:
    """Whether the capture's body file holds `size` bytes within a few seconds."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        bodies = list(folder.glob("*.body"))
        if bodies and bodies[0].stat().st_size >= size:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")
async def test_a_proxy_killed_mid_stream_leaves_a_partial_capture_replay_reports(
    upstream, tmp_path: Path
) -> None:
    fake, url = upstream
    events = sse(chat_chunk("Hel"), chat_chunk("lo"), chat_chunk(" there"))
    never = asyncio.Event()  # the upstream holds the stream open after its events
    fake.script(PATH, Script([Send(events), WaitFor(never), Send(sse("[DONE]"))]))
    port = free_port()
    folder = tmp_path / "captures"
    proc = subprocess.Popen(
        [sseproxy_command(), "--capture", str(folder), "--upstream", url],
        env={**os.environ, "SSEPROXY_LISTEN": f"127.0.0.1:{port}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.to_thread(wait_until_up, port, proc)
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"http://127.0.0.1:{port}{PATH}", json={"stream": True}) as response,
        ):
            assert await read_exactly(response, len(events)) == events
            assert await asyncio.to_thread(body_reaches, folder, len(events))
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        never.set()
    assert proc.returncode == -signal.SIGKILL
    [sidecar_path] = folder.glob("*.json")
    sidecar, body = load_capture(sidecar_path)
    assert sidecar["complete"] is False and body == events
    result = await asyncio.to_thread(replay, sidecar_path)
    assert result.returncode == 3, result.stderr
    assert "partial capture" in result.stderr
    assert (
        "capture_unfinished" in result.stderr and "stopped before the stream ended" in result.stderr
    )
    verdict = json.loads(result.stdout.splitlines()[-1])
    assert verdict["partial_capture"]["reason"] == "capture_unfinished"
    assert (verdict["events"], verdict["text_chars"]) == (3, len("Hello there"))


async def test_an_unfinished_capture_is_linked_by_the_inspector_and_served_cut_by_mock(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    from sseproxy.tools.mock import from_capture

    fake, _ = upstream
    events = sse(chat_chunk("Hi"))
    gate = asyncio.Event()
    fake.script(PATH, Script([Send(events), WaitFor(gate), Send(sse("[DONE]"))]))
    live = tmp_path / "live"
    client = await make_proxy(capture_dir=str(live))
    response = await client.post(PATH, json={"stream": True})
    request_id = response.headers["x-sseproxy-request-id"]
    assert await read_exactly(response, len(events)) == events
    await client.app[STATE].captures.drain()
    # the live stream's capture can be downloaded already: the sidecar as it stands now
    link = await client.get(f"/_sseproxy/captures/{request_id}/sidecar")
    assert link.status == 200
    assert json.loads(await link.read())["complete"] is False
    body = await client.get(f"/_sseproxy/captures/{request_id}/body")
    assert await body.read() == events
    copy = tmp_path / "copy"
    shutil.copytree(live, copy)
    gate.set()
    await response.read()
    await logs.wait()
    [sidecar_path] = copy.glob("*.json")
    recording = from_capture(sidecar_path)
    assert recording.http_complete is False  # served cut: nobody knows how it ended
    assert b"".join(chunk for chunk, _ in recording.chunks) == events


async def test_a_sessions_messages_are_on_disk_while_it_runs_and_replay_as_unfinished(
    aiohttp_server, logs, tmp_path: Path
) -> None:
    from aiohttp import web

    from sseproxy.capture.sessions import load_session
    from sseproxy.config import load
    from sseproxy.shell.app import create_app
    from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
    from tests.integration.ws_upstream import WsUpstream

    if not SESSIONS_SUPPORTED:
        pytest.skip("WebSocket sessions need aiohttp 3.14")
    gate = asyncio.Event()
    created = {"type": "session.created", "session": {"id": "sess_1"}}
    delta = {"type": "response.output_text.delta", "response_id": "r1", "delta": "Hi"}

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(json.dumps(created))
        await ws.receive()  # response.create
        await ws.send_str(json.dumps({"type": "response.created", "response": {"id": "r1"}}))
        await ws.send_str(json.dumps(delta))
        await gate.wait()  # the session stays open, the turn unfinished
        await ws.close(code=1000)

    up = WsUpstream()
    up.script = script
    upstream_url = str((await aiohttp_server(up.app())).make_url("")).rstrip("/")
    live = tmp_path / "live"
    settings = load(None, {}, {"upstream": upstream_url, "capture_dir": str(live)})
    app = create_app(settings)
    base = str((await aiohttp_server(app)).make_url("")).rstrip("/")
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(base + "/v1/realtime?model=m", autoclose=False) as ws,
    ):
        await ws.receive()  # session.created
        await ws.send_str(json.dumps({"type": "response.create"}))
        for _ in range(2):
            await ws.receive()
        await app[STATE].captures.drain()
        [sidecar_path] = live.glob("*.json")
        file = load_session(sidecar_path)
        assert file.sidecar["complete"] is False
        assert file.sidecar["handshake"]["status"] == 101
        assert file.sidecar["dialect"] == "openai-realtime"
        assert [(line["dir"], line.get("name")) for line in file.lines] == [
            ("upstream", "session.created"),
            ("client", "response.create"),
            ("upstream", "response.created"),
            ("upstream", "response.output_text.delta"),
        ]
        copy = tmp_path / "copy"
        shutil.copytree(live, copy)
        gate.set()
        await ws.receive()  # the close
    await logs.wait_sessions()
    await app[STATE].captures.drain()
    assert load_session(sidecar_path).sidecar["complete"] is True
    result = await asyncio.to_thread(replay, copy / sidecar_path.name)
    assert result.returncode == 3, result.stderr
    assert "partial capture" in result.stderr and "capture_unfinished" in result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])["session"]
    turn = json.loads(result.stdout.splitlines()[0])
    assert (turn["state"], turn["text_chars"]) == ("interrupted", 2)
    assert summary["turns"] == 1
    assert json.loads(result.stdout.splitlines()[-1])["partial_capture"] == {
        "truncated_at": 4,
        "reason": "capture_unfinished",
    }
    from sseproxy.tools.mock_session import Ending, from_session

    served = from_session(copy / sidecar_path.name)
    assert served.ending == Ending()  # served cut: the mock cannot make up how it ended
    assert len(served.steps) == 4  # its messages so far: three sent, one awaited


async def test_a_capture_directory_removed_mid_stream_costs_the_capture_not_a_byte(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    first = sse(chat_chunk("Hello"))
    last = sse(chat_chunk(finish="stop"), "[DONE]")
    gate = asyncio.Event()
    fake.script(PATH, Script([Send(first), WaitFor(gate), Send(last)]))
    folder = tmp_path / "captures"
    client = await make_proxy(capture_dir=str(folder))
    store = client.app[STATE].captures
    response = await client.post(PATH, json={"stream": True})
    assert await read_exactly(response, len(first)) == first
    await store.drain()
    assert files(folder)[1] == first
    shutil.rmtree(folder)  # the disk goes away under a running stream
    gate.set()
    assert await response.read() == last
    [record] = await logs.wait()
    assert record["state"] == "completed"
    await store.drain()
    await asyncio.sleep(0)  # the writer's failures are logged on the loop
    failures = [r for r in map(json.loads, logs.lines()) if r["event"] == "capture.failed"]
    assert 1 <= len(failures) <= 2  # the next write, then the sidecar: nothing more is tried
    assert not folder.exists()
