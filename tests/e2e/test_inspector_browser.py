"""The inspector page in a real headless browser (Debian's chromium), driven over the DevTools
protocol: while a scripted stream runs its row shows `streaming`, then its final state;
clicking the row draws the timeline. Saves a screenshot under artifacts/."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import shutil
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.fake_upstream import Script, Send, WaitFor
from tests.streams import sse

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,760",
]


class Browser:
    """Just enough of the Chrome DevTools protocol: navigate, evaluate, screenshot."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.ws.receive_json(), 30)
            if message.get("id") == call_id:
                return message.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, seconds: float = 15) -> Any:
        for _ in range(int(seconds * 10)):
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"never true in the page: {expression}")


@contextlib.asynccontextmanager
async def browser(tmp: Path):
    assert CHROMIUM is not None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM,
        *FLAGS,
        f"--user-data-dir={tmp}",
        f"--remote-debugging-port={port}",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with aiohttp.ClientSession() as session:
            targets = None
            for _ in range(100):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                        targets = [t for t in await resp.json() if t["type"] == "page"]
                        if targets:
                            break
                await asyncio.sleep(0.1)
            assert targets, "chromium did not start"
            async with session.ws_connect(targets[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                yield Browser(ws)
    finally:
        proc.kill()
        await proc.wait()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
async def test_inspector_shows_a_stream_live(upstream, make_proxy, logs, tmp_path: Path) -> None:
    fake, _ = upstream
    release = asyncio.Event()
    chunk = {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}],
    }
    end = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    fake.script(
        "/v1/chat/completions",
        Script([Send(sse(chunk)), WaitFor(release), Send(sse(end, "[DONE]"))]),
    )
    client = await make_proxy(keep_content=True)
    async with browser(tmp_path) as page:
        await page.call("Page.enable")
        await page.call("Page.navigate", url=str(client.make_url("/_sseproxy/")))
        await page.wait_for("document.getElementById('conn').textContent === 'live'")

        resp = await client.post("/v1/chat/completions", json={"model": "gpt-live", "stream": True})
        await resp.content.readany()
        row = "document.querySelector('#rows tr')"
        assert await page.wait_for(f"{row} && {row}.dataset.state === 'streaming'")
        assert "gpt-live" in await page.evaluate(f"{row}.textContent")

        release.set()
        await resp.read()
        assert await page.wait_for(f"{row}.dataset.state === 'completed'")

        await page.evaluate(f"{row}.click()")
        await page.wait_for("!!document.querySelector('#timeline')")
        detail = await page.evaluate("document.getElementById('detail').textContent")
        assert "first content" in detail and "Hello" in detail  # --keep-content shows text
        shot = await page.call("Page.captureScreenshot", format="png")
    ARTIFACTS.mkdir(exist_ok=True)
    png = base64.b64decode(shot["data"])
    (ARTIFACTS / "inspector.png").write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
