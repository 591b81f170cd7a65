"""`sseproxy demo`: the proxy in front of the built-in mock, one request per bundled sample,
the records printed: sseproxy at work without an API key or a network."""

from __future__ import annotations

import asyncio
import sys
from importlib import resources
from pathlib import Path
from typing import TextIO

import aiohttp
from aiohttp import web

from . import log
from .config import load
from .core import Dialect
from .mock import MOCK_HEADER, MockServer, load_recordings
from .proxy import create_app

PATHS = {Dialect.ANTHROPIC_MESSAGES: "/v1/messages", Dialect.OPENAI_CHAT: "/v1/chat/completions"}
STORIES = {
    "completed": "a normal answer",
    "cut-mid-sentence": "the connection drops mid-sentence",
    "done-after-failure": "a relay ends with [DONE] after the upstream failed",
    "overloaded-after-200": "Anthropic overloaded_error after HTTP 200",
}


def samples_dir() -> Path:
    return Path(str(resources.files("sseproxy").joinpath("data/samples")))


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def run(log_format: str = "console", out: TextIO | None = None) -> int:
    out = out or sys.stdout
    log.configure(log_format, "info", out, cache=False)
    mock = MockServer(load_recordings([samples_dir()]), speed=4.0)
    mock_runner, mock_url = await _serve(mock.app())
    proxy_runner, proxy_url = await _serve(create_app(load(None, {}, {"upstream": mock_url})))
    try:
        async with aiohttp.ClientSession() as session:
            for recording in mock.recordings:
                path = PATHS.get(recording.dialect, "/v1/chat/completions")
                story = STORIES.get(recording.name, recording.name)
                print(f"\n>>> POST {path}  [{recording.name}: {story}]", file=out, flush=True)
                try:
                    async with session.post(
                        proxy_url + path,
                        json={"model": "demo", "stream": True},
                        headers={MOCK_HEADER: recording.name},
                    ) as resp:
                        await resp.read()
                except aiohttp.ClientError as exc:
                    print(f"    (the client saw: {type(exc).__name__})", file=out, flush=True)
                await asyncio.sleep(0.05)  # let the record land before the next heading
    finally:
        await proxy_runner.cleanup()
        await mock_runner.cleanup()
    return 0
