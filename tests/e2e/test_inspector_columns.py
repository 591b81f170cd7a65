"""The inspector's list at 1,400 px in headless Chromium, with a realistic mix of streams
(recorded bodies from tests/corpus, a cut, a mid-stream error, a 429, two drills): the columns
that say what happened (state, status, finish, cut / error, TTFT, duration) are inside the
viewport, with the detail closed and open; drills are marked in the list and the detail; an
event row shows its delta, not the JSON prefix every event repeats. Saves
artifacts/inspector-list.png (docs/images/ holds a copy)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.corpus import file
from tests.e2e.test_inspector_browser import CHROMIUM, browser, save
from tests.e2e.test_inspector_debugger import open_page, open_row
from tests.integration.fake_upstream import Close, Script, Send, Sleep

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
]
COLUMNS = ["state", "status", "finish", "reason", "ttft", "duration"]
JSON = {"Content-Type": "application/json"}


def paced(body: bytes, parts: int = 4, pause: float = 0.04) -> list[Any]:
    """A recorded body sent in `parts` pieces a pause apart (a TTFT and a duration to show)."""
    size = -(-len(body) // parts)
    steps: list[Any] = []
    for i in range(0, len(body), size):
        steps += [Sleep(pause), Send(body[i : i + size])]
    return steps


async def send(client: Any, path: str, model: str, headers: dict[str, str] | None = None) -> None:
    with contextlib.suppress(aiohttp.ClientPayloadError):  # a cut stream: the client saw it
        body = {"model": model, "stream": True}
        await (await client.post(path, json=body, headers=headers)).read()


async def traffic(upstream: Any, make_proxy: Any, logs: Any) -> tuple[Any, list[dict[str, Any]]]:
    fake, _ = upstream
    chat = file("openai-chat/basic-text-no-usage.sse")  # api.openai.com, gpt-5-nano
    fake.script("/v1/chat/completions", Script(paced(chat)))
    fake.script("/v1/messages", Script(paced(file("anthropic-messages/text-basic-pings.sse"))))
    fake.script(
        "/v1/long/chat/completions", Script(paced(file("openai-chat/max-tokens-length-text.sse")))
    )
    cut = chat[: chat.index(b"\n\n", 900) + 2] + b'data: {"id":"chatcmpl-C4H'
    fake.script("/v1/cut/chat/completions", Script([*paced(cut, 2), Close()]))
    fake.script(
        "/v1/groq/chat/completions",
        Script(paced(file("openai-chat/groq-tool-use-failed-error.sse"))),
    )
    limited = (
        b'{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}'
    )
    fake.script("/v1/busy/chat/completions", Script([Send(limited)], status=429, headers=JSON))
    client = await make_proxy(keep_content=True, allow_inject=True)
    await send(client, "/v1/chat/completions", "gpt-5-nano")
    await send(client, "/v1/messages", "claude-sonnet-4-20250514")
    await send(client, "/v1/long/chat/completions", "gpt-4.1-mini")
    await send(client, "/v1/cut/chat/completions", "gpt-5-nano")
    await send(client, "/v1/groq/chat/completions", "openai/gpt-oss-120b")
    await send(client, "/v1/busy/chat/completions", "gpt-4.1")
    drill = {"x-sseproxy-inject": "cut-after=3"}
    await send(client, "/v1/chat/completions", "gpt-5-nano", headers=drill)
    await send(
        client,
        "/v1/chat/completions",
        "gpt-5-nano",
        headers={"x-sseproxy-inject": "inject-error=4"},
    )
    await send(client, "/v1/messages", "claude-sonnet-4-20250514")
    await send(client, "/v1/chat/completions", "gpt-4.1-mini")
    return client, await logs.wait(10)


async def boxes(page: Any) -> dict[str, Any]:
    """Each column's header and first visible cell: [left, right, top, bottom]."""
    return await page.evaluate(
        """(() => {
          const out = {}, cols = {state: "c-state", status: "c-status", finish: "c-finish",
            reason: "c-reason", ttft: "c-ttft", duration: "c-duration"};
          const heads = [...document.querySelectorAll('thead th')];
          for (const [name, cls] of Object.entries(cols)) {
            const th = document.querySelector('thead th.' + cls);
            const i = heads.indexOf(th);
            const rows = [...document.querySelectorAll('#rows tr')].filter(tr => !tr.hidden);
            const cells = rows.map(tr => tr.children[i]);
            out[name] = [th, ...cells].map(el => { const r = el.getBoundingClientRect();
              return [r.left, r.right, r.top, r.bottom, el.textContent]; });
          }
          out.viewport = [innerWidth, innerHeight];
          return out;
        })()"""
    )


def inside(found: dict[str, Any], right_edge: float) -> None:
    for name in COLUMNS:
        for left, right, _top, _bottom, shown in found[name]:
            assert 0 <= left < right <= right_edge, (name, shown, left, right, right_edge)


async def test_the_list_shows_what_happened_at_1400_px(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    client, records = await traffic(upstream, make_proxy, logs)
    by_path = {}
    for r in records:
        by_path.setdefault((r["path"], tuple(r.get("injected") or ())), r)
    drilled = by_path[("/v1/chat/completions", ("cut-after=3",))]
    assert drilled["state"] == "interrupted"
    states = sorted({r["state"] for r in records})
    assert {"completed", "interrupted", "failed", "http_error"} <= set(states)
    async with browser(tmp_path) as page:
        await open_page(page, client)
        await page.wait_for("document.querySelectorAll('#rows tr').length === 10")
        found = await boxes(page)
        assert found["viewport"] == [1400, 900]
        inside(found, 1400)
        texts = {name: [c[4] for c in found[name][1:]] for name in COLUMNS}
        assert "429" in texts["status"] and "stop" in texts["finish"]
        assert texts["reason"].count("upstream_closed") == 2  # the real cut and the drill
        assert all(t != "–" for t in texts["duration"])
        # the drills: marked in the state cell, the real cut is not
        marks = await page.evaluate(
            "[...document.querySelectorAll('#rows tr')].filter(tr => tr.dataset.drill)"
            ".map(tr => tr.dataset.id)"
        )
        assert sorted(marks) == sorted(r["request_id"] for r in records if r.get("injected"))
        save(await page.call("Page.captureScreenshot", format="png"), "inspector-list.png")

        # the detail open: the same columns stay beside it, left of it
        await open_row(page, drilled["request_id"])
        await page.wait_for("!!document.querySelector('#events')")
        detail_left = await page.evaluate(
            "document.getElementById('detail').getBoundingClientRect().left"
        )
        assert detail_left >= 1400 / 3
        inside(await boxes(page), detail_left)
        drill_note = await page.evaluate("document.getElementById('drill')?.textContent")
        assert drill_note and "cut-after=3" in drill_note
        # an event row shows its delta, not the {"id":"chatcmpl-... every event repeats
        gists = await page.evaluate(
            "[...document.querySelectorAll('#events tbody tr td.data')]"
            ".map(td => (td.querySelector('summary') || td.querySelector('code')).textContent)"
        )
        assert gists[:3] == ["role: assistant", '"Hi"', '" there"']
        assert not any(g.startswith('{"id"') for g in gists)
        save(await page.call("Page.captureScreenshot", format="png"), "inspector-detail.png")
