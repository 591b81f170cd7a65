"""When the proxy stops, WebSocket sessions end with close 1001 ("going away") sent to both
peers, never with a cut (1006): between turns at once, with a turn open when its turns end or
at the end of the grace; every turn and session record is written before the proxy exits."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from sseproxy.config import load
from sseproxy.server import InFlight, cut_remaining
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.test_lifecycle import TIMEOUT, Proxy
from tests.integration.ws_upstream import WsUpstream

pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)

CREATED = json.dumps({"type": "response.created", "response": {"id": "r1"}})
DONE = json.dumps({"type": "response.done", "response": {"id": "r1", "status": "completed"}})
# Every wait here is bounded by this; none measures how long something took.
WAIT = 10.0


async def echo_then_answer_close(ws: Any, request: web.Request) -> None:
    while True:
        msg = await ws.receive()
        if msg.type is WSMsgType.TEXT:
            await ws.send_frame(msg.data, WSMsgType.TEXT)
        elif msg.type is WSMsgType.CLOSE:
            await ws.close(code=msg.data, message=msg.extra.encode())
            return
        else:
            return


@pytest.fixture
async def upstream_url(aiohttp_server) -> tuple[WsUpstream, str]:
    up = WsUpstream()
    up.script = echo_then_answer_close
    server = await aiohttp_server(up.app())
    return up, str(server.make_url("")).rstrip("/")


async def open_session(http: aiohttp.ClientSession, base: str) -> Any:
    return await http.ws_connect(base + "/v1/realtime?model=m", protocols=("realtime",))


async def test_stopping_closes_a_session_between_turns_with_1001_both_ways(
    upstream_url, aiohttp_server, logs
) -> None:
    """The app's shutdown (what SIGTERM runs first) closes a session that has no turn open."""
    up, url = upstream_url
    server = await aiohttp_server(create_app(load(None, {}, {"upstream": url})))
    base = str(server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as http, await open_session(http, base) as ws:
        await ws.send_str(CREATED)
        await ws.send_str(DONE)
        assert [(await ws.receive()).data for _ in range(2)] == [CREATED, DONE]
        async with asyncio.timeout(WAIT):
            stopping = asyncio.create_task(server.close())
            msg = await ws.receive()  # the client answers the close (aiohttp's autoclose)
            await stopping
    assert (msg.type, msg.data, msg.extra) == (WSMsgType.CLOSE, 1001, "sseproxy is stopping")
    assert up.seen[0].messages[-1] == ("close", (1001, "sseproxy is stopping"))
    [turn] = await logs.wait(1)
    [session] = await logs.wait_sessions()
    assert turn["state"] == "completed"
    assert (
        session["closed_by"],
        session["close_code"],
        session["close_frame"],
        session["end_reason"],
    ) == ("proxy", 1001, True, "proxy_shutdown")


async def with_inflight(aiohttp_server, url: str) -> tuple[web.Application, InFlight, str]:
    """The proxy as `sseproxy serve` runs it: its handlers tracked for the cut."""
    app = create_app(load(None, {}, {"upstream": url}))
    inflight = InFlight()
    app.middlewares.insert(0, inflight.middleware())
    server = await aiohttp_server(app)
    return app, inflight, str(server.make_url("")).rstrip("/")


async def test_a_turn_open_at_the_end_of_the_grace_is_cut_with_1001_both_ways(
    upstream_url, aiohttp_server, logs
) -> None:
    up, url = upstream_url
    app, inflight, base = await with_inflight(aiohttp_server, url)
    async with aiohttp.ClientSession() as http, await open_session(http, base) as ws:
        await ws.send_str(CREATED)
        assert (await ws.receive()).data == CREATED  # the turn is open
        await app.shutdown()  # the first signal: the open turn keeps the session going
        await ws.send_str("{}")
        assert (await ws.receive()).data == "{}"
        async with asyncio.timeout(WAIT):
            cutting = asyncio.create_task(cut_remaining(app, inflight))  # the grace is over
            msg = await ws.receive()
            running = await cutting
    assert len(running) == 1
    assert (msg.type, msg.data) == (WSMsgType.CLOSE, 1001)
    assert up.seen[0].messages[-1] == ("close", (1001, "sseproxy is stopping"))
    [turn] = await logs.wait(1)
    [session] = await logs.wait_sessions()
    assert (turn["state"], turn["interruption"]["reason"]) == ("interrupted", "proxy_shutdown")
    assert (session["closed_by"], session["close_code"], session["end_reason"]) == (
        "proxy",
        1001,
        "proxy_shutdown",
    )
    assert not inflight.tasks  # every handler ended, its records written


async def test_a_turn_that_ends_within_the_grace_ends_whole_then_the_session_closes(
    upstream_url, aiohttp_server, logs
) -> None:
    up, url = upstream_url
    app, _, base = await with_inflight(aiohttp_server, url)
    async with aiohttp.ClientSession() as http, await open_session(http, base) as ws:
        await ws.send_str(CREATED)
        assert (await ws.receive()).data == CREATED
        await app.shutdown()
        await ws.send_str(DONE)  # the upstream ends the turn (it echoes)
        async with asyncio.timeout(WAIT):
            assert (await ws.receive()).data == DONE
            msg = await ws.receive()
    assert (msg.type, msg.data) == (WSMsgType.CLOSE, 1001)
    [turn] = await logs.wait(1)
    [session] = await logs.wait_sessions()
    assert turn["state"] == "completed"
    assert (session["closed_by"], session["end_reason"]) == ("proxy", "proxy_shutdown")
    assert up.seen[0].messages[-1] == ("close", (1001, "sseproxy is stopping"))


async def test_a_session_the_client_closes_during_the_stop_keeps_its_own_close(
    upstream_url, aiohttp_server, logs
) -> None:
    """A peer that closed first keeps its close: the proxy sends no 1001 over it."""
    up, url = upstream_url
    app, inflight, base = await with_inflight(aiohttp_server, url)
    async with aiohttp.ClientSession() as http, await open_session(http, base) as ws:
        await ws.send_str(CREATED)
        assert (await ws.receive()).data == CREATED
        await app.shutdown()
        async with asyncio.timeout(WAIT):
            await ws.close(code=4000, message=b"bye")
            await cut_remaining(app, inflight)
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_code"]) == ("client", 4000)
    assert ("close", (1001, "sseproxy is stopping")) not in up.seen[0].messages


# -- the installed command: SIGTERM -------------------------------------------------------


class ThreadedUpstream:
    """A WebSocket upstream in a thread (websockets' sync server): echoes, and keeps the close
    code it received."""

    def __init__(self) -> None:
        from websockets.sync.server import serve

        self.closes: list[int | None] = []
        self.closed = threading.Event()
        self.server = serve(self._handle, "127.0.0.1", 0)
        self.port = self.server.socket.getsockname()[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            for message in ws:
                ws.send(message)
        except ConnectionClosed:
            pass
        rcvd = ws.protocol.close_rcvd
        self.closes.append(rcvd.code if rcvd is not None else None)
        self.closed.set()

    def close(self) -> None:
        self.server.shutdown()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_sigterm_closes_open_sessions_with_1001_and_exits_before_the_grace(loop: str) -> None:
    """A session between turns, and a grace far beyond the test's timeout: SIGTERM sends 1001
    both ways at once, the records are written and the process exits 0."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    up = ThreadedUpstream()
    try:
        upstream = f"http://127.0.0.1:{up.port}"
        grace = str(TIMEOUT * 4)
        with Proxy(
            "--upstream", upstream, "--shutdown-grace", grace, "--event-loop", loop
        ) as proxy:
            assert proxy.wait_for("proxy.started")["event_loop"] == loop
            url = f"ws://127.0.0.1:{proxy.port}/v1/realtime?model=m"
            with connect(url, subprotocols=["realtime"], open_timeout=TIMEOUT) as ws:  # type: ignore[list-item]
                ws.send(CREATED)
                ws.send(DONE)
                assert [ws.recv(TIMEOUT) for _ in range(2)] == [CREATED, DONE]
                proxy.wait_for("request.finished")  # the turn ended: none is open
                proxy.proc.send_signal(signal.SIGTERM)
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(TIMEOUT)
            records = proxy.finish()
            stderr = proxy.stderr()
    finally:
        up.close()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert proxy.proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert up.closed.wait(TIMEOUT) and up.closes == [1001]
    [session] = [r for r in records if r["event"] == "session.finished"]
    assert (session["closed_by"], session["close_code"], session["end_reason"]) == (
        "proxy",
        1001,
        "proxy_shutdown",
    )
    assert records[-1]["event"] == "proxy.stopped"


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_sigterm_cuts_a_turn_still_open_at_the_grace_with_1001_both_ways(loop: str) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    up = ThreadedUpstream()
    try:
        upstream = f"http://127.0.0.1:{up.port}"
        with Proxy("--upstream", upstream, "--shutdown-grace", "1", "--event-loop", loop) as proxy:
            assert proxy.wait_for("proxy.started")["event_loop"] == loop
            url = f"ws://127.0.0.1:{proxy.port}/v1/realtime?model=m"
            with connect(url, subprotocols=["realtime"], open_timeout=TIMEOUT) as ws:  # type: ignore[list-item]
                ws.send(CREATED)
                assert ws.recv(TIMEOUT) == CREATED  # the turn is open, and stays so
                proxy.proc.send_signal(signal.SIGTERM)
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(TIMEOUT)
            records = proxy.finish()
            stderr = proxy.stderr()
    finally:
        up.close()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert proxy.proc.returncode == 0, stderr
    assert up.closed.wait(TIMEOUT) and up.closes == [1001]
    [turn] = [r for r in records if r["event"] == "request.finished"]
    [session] = [r for r in records if r["event"] == "session.finished"]
    assert (turn["state"], turn["interruption"]["reason"]) == ("interrupted", "proxy_shutdown")
    assert (session["closed_by"], session["close_code"], session["end_reason"]) == (
        "proxy",
        1001,
        "proxy_shutdown",
    )
    stopped = records[-1]
    assert (stopped["event"], stopped["cut_streams"]) == ("proxy.stopped", 1)
