"""A WebSocket session in the inspector, in headless Chromium: a Realtime session with a
completed and an interrupted turn through the proxy to the scripted WebSocket upstream. Its
row is live while it runs, expands to its turns (never loose rows of their own), and its
detail lists the messages both ways in the order they were sent, the close, the handshake
with its credentials redacted; peer strings (a message, the subprotocol, the close reason)
render as text. Saves docs/inspector.md's screenshot under artifacts/ (docs/ holds a copy)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import WSMsgType, web

from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.e2e.test_inspector_browser import CHROMIUM, Browser, browser, save
from tests.integration import test_websocket
from tests.integration.test_websocket import connect, j

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
    pytest.mark.skipif(not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"),
]
wsup, ws_proxy = test_websocket.wsup, test_websocket.ws_proxy
HOSTILE = "<img src=x onerror=window.__pwned=1>"
# a subprotocol is a token (no `<`, `>`, `;` or spaces): character references are what it can
# carry that HTML would turn into markup ("&lt" is "<" to an HTML parser, even without its `;`)
PROTOCOL = "realtime&ltimg&gt"
KEY = "ek_68af296e8e408191a1120ab6383263c2"
AUDIO = "UklGRiQAAABXQVZFZm10IBAAAAABAAEA" * 8
SENT = [
    ("client", "response.create"),
    ("upstream", "response.created"),
    ("upstream", "response.output_text.delta"),
    ("upstream", "response.output_audio.delta"),
    ("upstream", "response.done"),
    ("client", "response.create"),
    ("upstream", "response.created"),
    ("upstream", "response.output_text.delta"),
    ("upstream", "4000"),  # the close frame, its code
]


async def realtime(ws: web.WebSocketResponse, request: web.Request) -> None:
    await ws.receive()  # response.create
    await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
    await ws.send_str(
        j({"type": "response.output_text.delta", "response_id": "r1", "delta": HOSTILE})
    )
    await ws.send_str(
        j({"type": "response.output_audio.delta", "response_id": "r1", "delta": AUDIO})
    )
    await ws.send_str(j({"type": "response.done", "response": {"id": "r1", "status": "completed"}}))
    await ws.receive()  # the second response.create, once the test has looked at the row
    await ws.send_str(j({"type": "response.created", "response": {"id": "r2"}}))
    await ws.send_str(
        j({"type": "response.output_text.delta", "response_id": "r2", "delta": "Once upon"})
    )
    await ws.close(code=4000, message=HOSTILE.encode())


async def open_page(page: Browser, base: str) -> None:
    await page.call("Page.enable")
    await page.call(
        "Emulation.setDeviceMetricsOverride",
        width=1400,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    await page.call("Page.navigate", url=base + "/_sseproxy/")
    await page.wait_for("document.getElementById('conn').textContent === 'live'")


SESSION_ROW = "document.querySelector('#rows tr[data-kind=\"session\"]')"
SHOWN_TURNS = (
    "[...document.querySelectorAll('#rows tr[data-kind=\"turn\"]')].filter(t => !t.hidden)"
)


async def test_a_realtime_session_its_turns_and_its_messages(
    wsup, ws_proxy, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    up.script = realtime
    up.protocols = (PROTOCOL,)
    up.headers = {**up.headers, "x-evil": HOSTILE}
    base = await ws_proxy(keep_content=True)
    async with browser(tmp_path) as page:
        await open_page(page, base)
        ws = await connect(
            base,
            "/v1/realtime?model=gpt-realtime",
            protocols=(PROTOCOL, "openai-insecure-api-key." + KEY),
            headers={"Authorization": "Bearer " + KEY},
        )
        try:
            await ws.send_str(j({"type": "response.create"}))
            for _ in range(4):
                await ws.receive()
            # live: the session runs, its first turn has ended
            await page.wait_for(
                f"{SESSION_ROW}?.dataset.state === 'open'"
                f" && {SESSION_ROW}.textContent.includes('1 turns')"
                f" && {SESSION_ROW}.textContent.includes('completed')"
            )
            assert "← 4 msg" in await page.evaluate(f"{SESSION_ROW}.textContent")
            await ws.send_str(j({"type": "response.create"}))
            msg = await ws.receive()
            while msg.type is not WSMsgType.CLOSE:
                msg = await ws.receive()
            assert (msg.data, msg.extra) == (4000, HOSTILE)
        finally:
            await ws.close()
            await ws.http.close()
        [session] = await logs.wait_sessions()
        first, second = await logs.wait(2)
        assert (first["state"], second["state"]) == ("completed", "interrupted")
        sid = session["session_id"]

        await page.wait_for(
            f"{SESSION_ROW}.dataset.state === 'closed' && {SESSION_ROW}.textContent.includes('close 4000')"
        )
        row = await page.evaluate(f"{SESSION_ROW}.textContent")
        assert "2 turns" in row and "by upstream" in row and "interrupted" in row
        # the turns are under the session, folded, and nowhere else
        assert (
            await page.evaluate(
                "document.querySelectorAll('#rows tr[data-kind=\"stream\"]').length"
            )
            == 0
        )
        assert await page.evaluate(f"{SHOWN_TURNS}.length") == 0
        assert await page.evaluate(
            "[...document.querySelectorAll('#rows tr[data-kind=\"turn\"]')].map(t => t.dataset.id)"
        ) == [first["request_id"], second["request_id"]]

        # the keyboard opens it (and unfolds its turns), with its own link
        await page.evaluate(f"{SESSION_ROW}.focus()")
        await page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter")
        await page.wait_for(f"location.hash === '#/session/{sid}'")
        await page.wait_for("!!document.querySelector('#messages')")
        assert await page.evaluate(f"{SHOWN_TURNS}.map(t => t.dataset.state)") == [
            "completed",
            "interrupted",
        ]

        listed = await page.evaluate(
            "[...document.querySelectorAll('#messages tbody tr')].map(tr =>"
            " [tr.dataset.direction, tr.querySelector('.mtype').textContent])"
        )
        assert [tuple(m) for m in listed[: len(SENT)]] == SENT
        colours = await page.evaluate(
            "[...new Set([...document.querySelectorAll('#messages td.dir')]"
            ".map(td => getComputedStyle(td).color))]"
        )
        assert len(colours) == 2  # the two directions look different
        audio = await page.evaluate(
            "document.querySelectorAll('#messages tbody tr')[3].querySelector('td.data').textContent"
        )
        assert "never kept" in audio and AUDIO not in await page.evaluate("document.body.innerText")

        close = await page.evaluate("document.getElementById('close').innerText")
        assert "4000" in close and HOSTILE in close and "upstream" in close
        assert "turn_open_at_close" in await page.evaluate(
            "document.getElementById('session-anomalies').innerText"
        )
        detail = await page.evaluate("document.getElementById('detail').innerText")
        assert KEY not in detail and "openai-insecure-api-key" not in detail
        assert "[redacted]" in await page.evaluate(
            "document.getElementById('ws-req-headers').innerText"
        )
        assert HOSTILE in await page.evaluate(
            "document.getElementById('ws-resp-headers').innerText"
        )
        assert await page.evaluate("document.getElementById('subprotocol').textContent") == PROTOCOL
        json_text = await page.evaluate("document.getElementById('record-json').textContent")
        assert json.loads(json_text)["session_id"] == sid

        # peer strings are text: the message, the close reason, the subprotocol, a header
        await page.evaluate(
            "document.querySelectorAll('#detail details').forEach(d => d.open = true)"
        )
        await asyncio.sleep(0.2)
        assert await page.evaluate("document.querySelectorAll('img').length") == 0
        assert await page.evaluate("window.__pwned") is None
        assert detail.count(HOSTILE) >= 3
        await page.evaluate(
            "document.querySelectorAll('#detail details').forEach((d, i) => d.open = i === 2)"
        )  # the hostile text delta, pretty-printed
        save(await page.call("Page.captureScreenshot", format="png"), "inspector-session.png")

        # a turn's row opens the turn's detail, as a stream's does
        await page.evaluate(
            f"document.querySelector('#rows tr[data-id=\"{second['request_id']}\"]').click()"
        )
        await page.wait_for(
            f"document.querySelector('#detail h2')?.textContent.includes('{second['request_id']}')"
        )
        assert "upstream_closed" in await page.evaluate(
            "document.getElementById('detail').innerText"
        )

        # the sessions chip shows only sessions; a state chip the session whose turn has it
        await page.evaluate(
            "document.querySelector('#counts button[data-state=\"sessions\"]').click()"
        )
        assert await page.evaluate(f"{SESSION_ROW}.hidden") is False
        await page.evaluate(
            "document.querySelector('#counts button[data-state=\"interrupted\"]').click()"
        )
        assert await page.evaluate(f"{SHOWN_TURNS}.map(t => t.dataset.id)") == [
            second["request_id"]
        ]
