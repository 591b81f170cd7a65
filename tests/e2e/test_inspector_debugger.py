"""The inspector as a debugger, in headless Chromium: with 100 rows the detail of a clicked row
is in the viewport beside the list (and the keyboard moves through the rows); the state chips,
selects and search narrow the rows; the event list of a Chat, an Anthropic and a Bedrock stream
has one row per event the record counted; the raw view shows each chunk and the cut tail;
headers are redacted; a hostile upstream string renders as text and never runs. Saves the
docs/inspector.md's screenshots under artifacts/ (docs/ holds copies)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.test_inspector_browser import CHROMIUM, Browser, browser, save
from tests.integration.fake_upstream import Close, Script, Send, Sleep
from tests.streams import chat_chunk, sse
from tests.unit.test_transport_truth import ANTHROPIC, BEDROCK_CONVERSE, CHAT

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
]
EVENTSTREAM = {"Content-Type": "application/vnd.amazon.eventstream"}
HOSTILE = "<img src=x onerror=window.__pwned=1>"
KEY = "sk-proj-browsersecret0123456789abcdef"
TAIL = b'data: {"id":"c","choices":[{"delta":{"content":" the Vol'


async def send(client: Any, path: str, model: str = "m", **kwargs: Any) -> None:
    with contextlib.suppress(aiohttp.ClientPayloadError):  # a cut stream: the client saw it
        await (await client.post(path, json={"model": model, "stream": True}, **kwargs)).read()


async def records(logs: Any, n: int) -> list[dict[str, Any]]:
    return await logs.wait(n)


async def open_page(page: Browser, client: Any, hash_: str = "") -> None:
    await page.call("Page.enable")
    await page.call(
        "Emulation.setDeviceMetricsOverride",
        width=1400,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    await page.call("Page.navigate", url=str(client.make_url("/_sseproxy/")) + hash_)
    await page.wait_for("document.getElementById('conn').textContent === 'live'")


async def open_row(page: Browser, request_id: str) -> None:
    await page.evaluate(f"document.querySelector('#rows tr[data-id=\"{request_id}\"]').click()")
    await page.wait_for(
        f"document.querySelector('#detail h2')?.textContent.includes('{request_id}')"
    )


async def test_the_detail_is_beside_a_hundred_rows_and_filters_narrow_them(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    fake.script("/v1/chat/completions", Script([Send(sse(chat_chunk("Hi", "stop"), "[DONE]"))]))
    failing = sse(chat_chunk("Hi"), {"error": {"message": "overloaded", "type": "server_error"}})
    fake.script("/v1/fail/chat/completions", Script([Send(failing)]))
    fake.script("/v1/cut/chat/completions", Script([Send(sse(chat_chunk("Hi")) + TAIL), Close()]))
    client = await make_proxy(keep_content=True)
    for i in range(96):
        await send(client, "/v1/chat/completions", model=f"gpt-{i % 3}")
    await send(client, "/v1/fail/chat/completions", model="gpt-fail")
    await send(client, "/v1/fail/chat/completions", model="gpt-fail")
    await send(client, "/v1/cut/chat/completions", model="gpt-cut")
    await send(client, "/v1/chat/completions", model="gpt-needle")
    recs = await records(logs, 100)
    oldest = recs[0]["request_id"]
    async with browser(tmp_path) as page:
        await open_page(page, client)
        assert await page.evaluate("document.querySelectorAll('#rows tr').length") == 100
        await open_row(page, oldest)  # the last row of the list, far below the fold
        box = await page.evaluate(
            "(() => { const r = document.getElementById('detail').getBoundingClientRect();"
            " return [r.top, r.left, r.bottom, innerHeight, innerWidth]; })()"
        )
        top, left, bottom, height, width = box
        assert 0 <= top < height / 4 and left >= width / 3 and bottom <= height + 1
        assert await page.evaluate("location.hash") == f"#/stream/{oldest}"  # deep link

        # the keyboard: the focused row, then the one above it (newer)
        await page.evaluate(f"document.querySelector('#rows tr[data-id=\"{oldest}\"]').focus()")
        await page.call("Input.dispatchKeyEvent", type="keyDown", key="ArrowUp", code="ArrowUp")
        second = recs[1]["request_id"]
        await page.wait_for(f"location.hash === '#/stream/{second}'")
        await page.wait_for(
            f"document.querySelector('#detail h2').textContent.includes('{second}')"
        )

        visible = "[...document.querySelectorAll('#rows tr')].filter(tr => !tr.hidden)"
        await page.evaluate(
            "document.querySelector('#counts button[data-state=\"failed\"]').click()"
        )
        assert await page.evaluate(f"{visible}.map(tr => tr.dataset.state)") == ["failed"] * 2
        assert "failed 2" in await page.evaluate("document.getElementById('counts').textContent")
        await page.evaluate("document.querySelector('#counts button[data-state=\"\"]').click()")
        await page.evaluate(
            "(() => { const f = document.getElementById('f-text'); f.value = 'needle';"
            " f.dispatchEvent(new Event('input')); })()"
        )
        assert await page.evaluate(f"{visible}.length") == 1
        await page.evaluate(
            "(() => { const f = document.getElementById('f-text'); f.value = '';"
            " f.dispatchEvent(new Event('input')); const s = document.getElementById('f-model');"
            " s.value = 'gpt-1'; s.dispatchEvent(new Event('change')); })()"
        )
        assert await page.evaluate(f"{visible}.length") == 32
        assert await page.evaluate("document.querySelector('#rows tr td.time').textContent")


@pytest.mark.parametrize(
    ("case", "path", "headers"),
    [
        (CHAT, "/v1/chat/completions", None),
        (ANTHROPIC, "/v1/messages", None),
        (BEDROCK_CONVERSE, "/model/m/converse-stream", EVENTSTREAM),
    ],
    ids=["chat", "anthropic", "bedrock"],
)
async def test_the_event_list_has_one_row_per_event_the_record_counted(
    case: Any, path: str, headers: dict[str, str] | None, upstream, make_proxy, logs, tmp_path
) -> None:
    fake, _ = upstream
    body = case.decided + case.marker
    half = len(body) // 2
    fake.script(
        path,
        Script(
            [Send(body[:half]), Sleep(0.03), Send(body[half:])],
            headers=headers or {"Content-Type": "text/event-stream"},
        ),
    )
    client = await make_proxy(keep_content=True)
    await send(client, path)
    [record] = await records(logs, 1)
    async with browser(tmp_path) as page:
        await open_page(page, client, f"#/stream/{record['request_id']}")
        await page.wait_for("!!document.querySelector('#events')")
        kinds = await page.evaluate(
            "[...document.querySelectorAll('#events tbody tr')].map(tr => tr.dataset.kind)"
        )
        assert len([k for k in kinds if k != "comment"]) == record["events"] > 0
        assert await page.evaluate("document.querySelectorAll('#raw .chunk').length") == 2


async def test_a_cut_stream_shows_its_chunks_and_tail_and_redacted_headers(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    first = sse(chat_chunk("Once upon"))
    fake.script(
        "/v1/chat/completions",
        Script([Send(first), Sleep(0.05), Send(sse(chat_chunk(" a time")) + TAIL), Close()]),
    )
    client = await make_proxy(keep_content=True, capture_dir=str(tmp_path / "captures"))
    await send(client, f"/v1/chat/completions?key={KEY}", headers={"x-api-key": KEY})
    [record] = await records(logs, 1)
    assert record["state"] == "interrupted"
    async with browser(tmp_path / "browser") as page:
        await open_page(page, client, f"#/stream/{record['request_id']}")
        await page.wait_for(
            "!!document.querySelector('#raw') && !!document.querySelector('#replay')"
        )
        chunks = await page.evaluate(
            "[...document.querySelectorAll('#raw .chunk pre')].map(p => p.textContent)"
        )
        assert chunks == [first.decode(), (sse(chat_chunk(" a time")) + TAIL).decode()]
        assert await page.evaluate("document.querySelector('#raw mark.tail').textContent") == (
            TAIL.decode()
        )
        detail = await page.evaluate("document.getElementById('detail').innerText")
        assert KEY not in detail and "[redacted]" in detail
        assert "[redacted]" in await page.evaluate(
            "document.getElementById('req-headers').textContent"
        )
        assert (await page.evaluate("document.getElementById('replay').textContent")).startswith(
            "sseproxy replay "
        )
        await page.evaluate("document.getElementById('raw').scrollIntoView()")
        save(await page.call("Page.captureScreenshot", format="png"), "inspector-raw-bytes.png")


async def test_hostile_upstream_strings_render_as_text(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    events = sse(chat_chunk(HOSTILE), {"error": {"message": HOSTILE, "type": HOSTILE}})
    fake.script(
        "/v1/chat/completions",
        Script([Send(events)], headers={"Content-Type": "text/event-stream", "X-Evil": HOSTILE}),
    )
    error = json.dumps({"error": {"type": "not_found_error", "message": HOSTILE}}).encode()
    fake.script(
        "/v1/missing/chat/completions",
        Script([Send(error)], status=404, headers={"Content-Type": "application/json"}),
    )
    client = await make_proxy(keep_content=True)
    await send(client, "/v1/chat/completions", model=HOSTILE)
    await send(client, "/v1/missing/chat/completions?q=%3Cimg%20src=x%20onerror=1%3E", model="m")
    failed, missing = await records(logs, 2)
    assert failed["state"] == "failed" and missing["state"] == "http_error"
    async with browser(tmp_path) as page:
        await open_page(page, client)
        for record in (failed, missing):
            await open_row(page, record["request_id"])
            await page.wait_for("!!document.querySelector('#record-json')")
            for details in ("#events details", "#detail details"):
                await page.evaluate(
                    f"document.querySelectorAll('{details}').forEach(d => d.open = true)"
                )
            await asyncio.sleep(0.2)
            assert await page.evaluate("document.querySelectorAll('img').length") == 0
            assert await page.evaluate("window.__pwned") is None
            assert HOSTILE in await page.evaluate("document.body.innerText")
        # the failed stream: the model in its row, the header, the event's data, the message
        await open_row(page, failed["request_id"])
        text = await page.evaluate("document.getElementById('detail').innerText")
        assert text.count(HOSTILE) >= 4
        assert HOSTILE in await page.evaluate("document.getElementById('resp-headers').innerText")
        save(await page.call("Page.captureScreenshot", format="png"), "inspector-hostile.png")
        # the 404: status, the error's fields and the upstream's body as JSON; no timeline
        await open_row(page, missing["request_id"])
        card = await page.evaluate("document.getElementById('errcard').innerText")
        assert "404" in card and "not_found_error" in card
        body = await page.evaluate("document.querySelector('#errcard .errbody').textContent")
        assert json.loads(body) == json.loads(error)
        assert await page.evaluate("document.querySelector('#timeline')") is None
        save(await page.call("Page.captureScreenshot", format="png"), "inspector-http-error.png")
