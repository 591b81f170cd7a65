"""Agents' requests through the installed command on its defaults (issue 30): the records
name the client and the run from the agents' own headers (tests/data/agent_headers/), and
link the agents' retries: Codex sending a cut turn again with its JSON in a new key order,
Claude Code sending a turn again without `stream` after an `overloaded_error`."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import aiohttp
import orjson
import pytest

from tests.agent_headers import AGENTS
from tests.product.proxy_process import ProxyProcess

pytestmark = pytest.mark.product


def reordered(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: reordered(v) for k, v in reversed(obj.items())}
    return obj


async def post(base: str, path: str, body: Any, headers: dict[str, str]) -> None:
    async with aiohttp.ClientSession() as http, asyncio.timeout(30):
        sent = {**headers, "content-type": "application/json"}
        async with http.post(base + path, data=orjson.dumps(body), headers=sent) as response:
            with contextlib.suppress(aiohttp.ClientPayloadError):  # the cut the fake makes
                await response.read()


async def test_codex_retry_in_a_new_key_order(proxy: ProxyProcess) -> None:
    codex = AGENTS["codex"]
    name = f"cut-{uuid.uuid4().hex[:10]}"  # the fake cuts each attempt
    body = {**codex["body"], "model": name}
    await post(proxy.url, "/v1/responses", body, codex["headers"])
    await post(proxy.url, "/v1/responses", reordered(body), codex["headers"])
    first, again = await proxy.wait_records(lambda r: r.get("model") == name, 2)
    assert first["state"] == "interrupted"
    assert again["retry"]["of"] == first["request_id"]
    assert again["retry"]["linked_by"] == "same_meaning"
    assert first["run_id"] == again["run_id"] == codex["run_id"]
    assert again["client"] == codex["client"]


async def test_claude_code_retry_without_stream(proxy: ProxyProcess) -> None:
    claude = AGENTS["claude-code"]
    name = f"overloaded-{uuid.uuid4().hex[:10]}"  # an in-band overloaded_error after 200
    body = {**claude["body"], "model": name}
    await post(proxy.url, "/v1/messages", body, claude["headers"])
    plain = {k: v for k, v in body.items() if k != "stream"}
    await post(proxy.url, "/v1/messages", plain, claude["headers"])
    first, again = await proxy.wait_records(lambda r: r.get("model") == name, 2)
    assert (first["state"], first["error"]["type"]) == ("failed", "overloaded_error")
    assert again["retry"]["of"] == first["request_id"]
    assert again["retry"]["linked_by"] == "without_stream"
    assert first["run_id"] == again["run_id"] == claude["run_id"]
    assert again["client"] == claude["client"]
