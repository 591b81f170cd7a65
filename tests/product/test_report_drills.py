"""`sseproxy report` on the records the installed command wrote: a drill (a fault the proxy
injected on purpose, `--allow-inject` and `x-sseproxy-inject`) is counted apart from the real
cut of the same reason, in the installed `sseproxy report --json` and its terminal text."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from pathlib import Path

import aiohttp
import pytest

from tests.product.conftest import Launch
from tests.product.proxy_process import installed_command

pytestmark = pytest.mark.product
TIMEOUT = aiohttp.ClientTimeout(total=60)


async def chat(url: str, model: str, headers: dict[str, str] | None = None) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        with contextlib.suppress(aiohttp.ClientPayloadError):  # a cut: the client saw it
            async with session.post(url, json=body, headers=headers) as response:
                await response.read()


async def test_report_counts_a_drill_apart_from_a_real_cut(launch: Launch, tmp_path: Path) -> None:
    proxy = launch(["--allow-inject"])
    tag = uuid.uuid4().hex[:8]
    url = proxy.url + "/v1/chat/completions"
    await chat(url, f"ok-{tag}")
    await chat(url, f"cut-{tag}")  # the fake provider drops the connection halfway
    await chat(url, f"ok-drill-{tag}", headers={"x-sseproxy-inject": "cut-after=3"})
    records = await proxy.wait_records(lambda r: tag in (r.get("model") or ""), n=3)
    assert sorted(r["state"] for r in records) == ["completed", "interrupted", "interrupted"]
    log = tmp_path / "sseproxy.log"
    log.write_bytes(b"\n".join(proxy.lines()) + b"\n")
    done = subprocess.run(
        [str(installed_command()), "report", "--json", str(log)],
        capture_output=True,
        timeout=60,
        check=True,
    )
    data = json.loads(done.stdout)
    assert (data["lines"]["records"], data["lines"]["drills"]) == (2, 1)
    assert data["cuts"] == [{"reason": "upstream_closed", "requests": 1}]
    assert data["drills"]["requests"] == 1
    assert data["drills"]["faults"] == [{"fault": "cut-after=3", "requests": 1}]
    assert data["states"] == {"completed": 1, "interrupted": 1}
    shown = subprocess.run(
        [str(installed_command()), "report", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "2 requests and 1 drills (counted apart)" in shown
