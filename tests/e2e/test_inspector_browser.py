"""The inspector page in a real headless browser (Debian's chromium), driven over the DevTools
protocol: while a scripted stream runs its row shows `streaming`, then its final state;
clicking the row draws the timeline; streams that ended before the page opened are in its
first paint, with the reason of a failed or interrupted one. Saves screenshots under
artifacts/ (docs/ holds copies of them)."""

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

from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Close, Script, Send, Sleep, WaitFor
from tests.streams import chat_chunk, sse

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
    keepalive = Send(b": keep-alive\n\n")  # bytes, but no content: a content stall
    fake.script(
        "/v1/chat/completions",
        Script(
            [
                Send(sse(chunk)),
                WaitFor(release),
                keepalive,
                Sleep(0.1),
                keepalive,
                Sleep(0.1),
                Send(sse(end, "[DONE]")),
            ]
        ),
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

        # the shell reports writes that waited on the client; this test plays its part
        [view] = client.app[STATE].inspector.streams.values()
        assert view.duration_ms is not None
        seconds = view.duration_ms / 1000
        view.client_wait(view.start + 0.3 * seconds, view.start + 0.45 * seconds)
        await page.evaluate(f"{row}.click()")
        await page.wait_for("!!document.querySelector('#timeline')")
        detail = await page.evaluate("document.getElementById('detail').textContent")
        assert "first content" in detail and "Hello" in detail  # --keep-content shows text
        assert await legend_matches_bands(page) == ["gap", "stall", "wait"]
        shot = await page.call("Page.captureScreenshot", format="png")
    save(shot, "inspector.png")


async def legend_matches_bands(page: Browser) -> list[str]:
    """Each band drawn has a legend swatch of the same colour and opacity; returns the bands."""
    pairs = await page.evaluate(
        """[...document.querySelectorAll('#timeline rect')].map(rect => {
          const probe = document.createElement('i');
          probe.style.background = rect.getAttribute('fill');
          document.body.append(probe);
          const drawn = getComputedStyle(probe).backgroundColor + ' ' + rect.getAttribute('opacity');
          probe.remove();
          const sw = document.querySelector('.legend .l-' + rect.getAttribute('class') + ' .swatch');
          const shown = sw ? getComputedStyle(sw).backgroundColor + ' ' + getComputedStyle(sw).opacity : null;
          return [rect.getAttribute('class'), drawn, shown];
        })"""
    )
    for band, drawn, shown in pairs:
        assert drawn == shown, band
    return sorted({band for band, _, _ in pairs})


def save(shot: dict[str, Any], name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    png = base64.b64decode(shot["data"])
    (ARTIFACTS / name).write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
async def test_first_paint_shows_failed_and_interrupted_streams(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    """The feed is refused (no viewer allowed), so every row on the page comes from the first
    paint; each bad row names its reason, and the legend's gap colour is the band's."""
    fake, _ = upstream
    pause = Sleep(0.15)  # a visible longest gap in each timeline
    failed = sse(
        chat_chunk("The answer is"),
        {"error": {"message": "The server is overloaded", "type": "server_error"}},
    )
    fake.script("/v1/chat/completions", Script([Send(sse(chat_chunk("Hel"))), pause, Send(failed)]))
    first = sse(chat_chunk("Once upon"))
    rest = sse(chat_chunk(" a time")) + b'data: {"id":"c","cho'
    fake.script("/v1/cut/chat/completions", Script([Send(first), pause, Send(rest), Close()]))
    client = await make_proxy(keep_content=True)
    await (await client.post("/v1/chat/completions", json={"model": "gpt-failing"})).read()
    with pytest.raises(aiohttp.ClientPayloadError):
        await (await client.post("/v1/cut/chat/completions", json={"model": "gpt-cut"})).read()
    for _ in range(200):
        if len(logs.records()) == 2:
            break
        await asyncio.sleep(0.01)
    states = {r["model"]: (r["state"], r["request_id"]) for r in logs.records()}
    assert states["gpt-failing"][0] == "failed" and states["gpt-cut"][0] == "interrupted"
    inspector = client.app[STATE].inspector
    # the shell fills output_tokens_per_s from usage; these streams carry none
    inspector.streams[states["gpt-failing"][1]].output_tokens_per_s = 42.0
    inspector.max_viewers = 0  # the page gets no live feed at all
    async with browser(tmp_path) as page:
        await page.call("Page.enable")
        await page.call("Page.navigate", url=str(client.make_url("/_sseproxy/")))
        await page.wait_for("document.getElementById('conn').textContent.includes('unavailable')")
        assert await page.evaluate("document.querySelectorAll('#rows tr').length") == 2
        assert await page.evaluate("getComputedStyle(document.getElementById('none')).display") == (
            "none"
        )
        speed = await page.evaluate(
            "[...document.querySelectorAll('#rows tr')].map(tr => tr.querySelector('.tps').textContent)"
        )
        assert sorted(speed) == ["42.0", "–"]
        assert await page.evaluate("document.querySelectorAll('thead th')[7].textContent") == (
            "tok/s"
        )
        # the page retries and goes live; its first batch re-renders every row (so the
        # screenshots show these streams as they are: without a speed)
        inspector.streams[states["gpt-failing"][1]].output_tokens_per_s = None
        inspector.max_viewers = 1
        await page.wait_for("document.getElementById('conn').textContent === 'live'")
        await page.wait_for(
            "[...document.querySelectorAll('#rows tr')].every(tr => tr.querySelector('.tps').textContent === '–')"
        )
        for model, reason, name in (
            ("gpt-failing", "server_error", "inspector-failed.png"),
            ("gpt-cut", "upstream_closed", "inspector-interrupted.png"),
        ):
            row = f"document.querySelector('#rows tr[data-id=\"{states[model][1]}\"]')"
            assert await page.evaluate(f"{row}.querySelector('td.reason').textContent") == reason
            await page.evaluate(f"{row}.click()")
            await page.wait_for(
                f"!!document.querySelector('#timeline') && "
                f"document.getElementById('detail').textContent.includes('{states[model][1]}')"
            )
            assert "gap" in await legend_matches_bands(page)
            save(await page.call("Page.captureScreenshot", format="png"), name)
