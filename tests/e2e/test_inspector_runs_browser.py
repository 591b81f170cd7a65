"""An agent run in the inspector, in headless Chromium: two requests that Codex sent with the
same `session-id` (tests/data/agent_headers/codex.json) sit under one run row, folded, which
names the run and the client; a request that names no run (aider's, through the openai SDK)
has a row of its own; the run row unfolds to its requests."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.agent_headers import AGENTS
from tests.e2e.test_inspector_browser import CHROMIUM, browser
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
]
RUN_ROW = "document.querySelector('#rows tr[data-kind=\"run\"]')"
SHOWN_STREAMS = (
    "[...document.querySelectorAll('#rows tr[data-kind=\"stream\"]')].filter(t => !t.hidden)"
    ".map(t => t.dataset.id)"
)


async def test_a_runs_requests_are_listed_under_one_row(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    fake.script("*", Script([Send(sse(chat_chunk("hi"), chat_chunk(finish="stop"), "[DONE]"))]))
    client = await make_proxy()
    codex, aider = AGENTS["codex"], AGENTS["aider"]
    for agent in (codex, codex, aider):
        headers = {**agent["headers"], "content-type": "application/json"}
        body = orjson.dumps(agent["body"])
        await (await client.post(agent["path"], data=body, headers=headers)).read()
    first, second, alone = await logs.wait(3)
    async with browser(tmp_path) as page:
        await page.call("Page.enable")
        await page.call("Page.navigate", url=str(client.make_url("/_sseproxy/")))
        await page.wait_for(f"{RUN_ROW} !== null")
        text = await page.evaluate(f"{RUN_ROW}.textContent")
        assert f"run {codex['run_id']}" in text and "codex 0.171.0" in text
        assert first["state"] == second["state"] and f"{first['state']} 2" in text
        assert (
            await page.evaluate("document.querySelectorAll('#rows tr[data-kind=\"run\"]').length")
            == 1
        )
        # folded: only the request of no run is shown
        assert await page.evaluate(SHOWN_STREAMS) == [alone["request_id"]]
        await page.evaluate(f"{RUN_ROW}.click()")
        shown = await page.evaluate(SHOWN_STREAMS)
        assert set(shown) == {first["request_id"], second["request_id"], alone["request_id"]}
        # unfolded, the run's requests sit right under its row, newest first
        order = await page.evaluate(
            "[...document.querySelectorAll('#rows tr')].filter(t => !t.hidden)"
            ".map(t => t.dataset.id)"
        )
        run_at = order.index(f"run:{codex['run_id']}")
        assert order[run_at + 1 : run_at + 3] == [second["request_id"], first["request_id"]]
