"""`sseproxy demo`: the proxy in front of the built-in mock, one request per bundled sample,
made by the official SDK a typical app would use; the record printed beside what that client
concluded: sseproxy at work without an API key or a network."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TextIO

import aiohttp
import structlog
from aiohttp import web

from sseproxy.cli_io import EXIT_BROKEN_PIPE, quiet_stdout
from sseproxy.config import load
from sseproxy.core import Dialect
from sseproxy.observe import log
from sseproxy.shell.app import create_app
from sseproxy.tools.mock import MOCK_HEADER, MockServer, Recording, load_recordings, samples_dir

PATHS = {Dialect.ANTHROPIC_MESSAGES: "/v1/messages", Dialect.OPENAI_CHAT: "/v1/chat/completions"}
SDKS = {Dialect.ANTHROPIC_MESSAGES: "anthropic", Dialect.OPENAI_CHAT: "openai"}
STORIES = {
    "openai-chat/completed": "a normal answer",
    "openai-chat/max-tokens": "the answer stops at max_tokens",
    "openai-chat/cut-mid-sentence": "the connection drops mid-sentence",
    "openai-chat/done-after-failure": "a relay ends with [DONE] after the upstream failed",
    "anthropic-messages/overloaded-after-200": "Anthropic overloaded_error after HTTP 200",
}
# One line per term the records and conclusions show.
GLOSSARY = (
    ("state", "how the stream really ended: completed only on the API's own terminal signal"),
    ("finish", "the finish reason the API sent (stop, length, ...); '-': none came"),
    ("ttft", "time to first token: from the request to the first content delta"),
    ("dur", "duration: from the request to the stream's last byte"),
    ("B", "response bytes received from the upstream"),
    ("cut", "why the stream stopped early (upstream_closed: the upstream hung up before the end)"),
    ("partial event", "an SSE event that started but never ended: the bytes stopped mid-event"),
    ("anomalies", "protocol oddities seen on the way, e.g. [DONE] without a finish reason"),
)
SDK_TIMEOUT = 10.0
RECORD_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Conclusion:
    """What a client made of one stream: an exception, or text and a finish reason."""

    client: str
    chars: int
    finish: str | None = None
    raised: str | None = None
    predicted: bool = False  # the SDK is not installed: this is what it would do


class Output:
    """stdout that notices a closed pipe (`sseproxy demo | head`) instead of raising."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.closed = False

    def line(self, text: str = "") -> None:
        if self.closed:
            return
        try:
            self.out.write(text + "\n")
            self.out.flush()
        except BrokenPipeError:
            self.closed = True

    # The file interface structlog's PrintLogger uses.
    def write(self, text: str) -> int:
        if not self.closed:
            try:
                return self.out.write(text)
            except BrokenPipeError:
                self.closed = True
        return len(text)

    def flush(self) -> None:
        if not self.closed:
            try:
                self.out.flush()
            except BrokenPipeError:
                self.closed = True

    def isatty(self) -> bool:
        return self.out.isatty()


def main(log_format: str, color: bool = True) -> int:
    """The `sseproxy demo` command; when the reader went away, quietly EXIT_BROKEN_PIPE, as
    every command that prints. `color=False`: NO_COLOR, read by the command line."""
    output = Output(sys.stdout)
    code = asyncio.run(run(log_format, output, color=color))
    if output.closed:
        quiet_stdout()  # Python flushes stdout again at exit: that is quiet too
        return EXIT_BROKEN_PIPE
    return code


async def run(
    log_format: str = "console", out: TextIO | Output | None = None, color: bool = True
) -> int:
    output = out if isinstance(out, Output) else Output(out or sys.stdout)
    records: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    log.configure(log_format, "info", output, cache=False, color=color)  # type: ignore[arg-type]
    _tee_records(records)
    recordings = sorted(load_recordings([samples_dir()]), key=_story_order)
    mock = MockServer(recordings, speed=4.0, say=lambda _: None)
    mock_runner, mock_url = await _serve(mock.app())
    proxy_runner, proxy_url = await _serve(create_app(load(None, {}, {"upstream": mock_url})))
    try:
        for recording in mock.recordings:
            if output.closed:
                break
            path = PATHS.get(recording.dialect, "/v1/chat/completions")
            story = STORIES.get(recording.name, recording.name)
            output.line(f"\n>>> {recording.name}: {story}   (POST {path})")
            conclusion = await _client(recording, proxy_url)
            record = await asyncio.wait_for(records.get(), RECORD_TIMEOUT)
            if conclusion is None:
                conclusion = predict(recording, record)
            output.line("    " + describe(conclusion, record))
        output.line("\nTerms:")
        for term, meaning in GLOSSARY:
            output.line(f"  {term:<14}{meaning}")
    finally:
        await proxy_runner.cleanup()
        await mock_runner.cleanup()
    return 0


def _story_order(recording: Recording) -> tuple[int, str]:
    names = list(STORIES)
    return (names.index(recording.name) if recording.name in names else len(names), recording.name)


def _tee_records(queue: asyncio.Queue[dict[str, Any]]) -> None:
    """Hand each request.finished record (redacted, as printed) to the demo as well."""

    def tee(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if event.get("event") == "request.finished":
            queue.put_nowait(dict(event))
        return event

    processors = list(structlog.get_config()["processors"])
    processors.insert(len(processors) - 1, tee)
    structlog.configure(processors=processors)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def _client(recording: Recording, proxy_url: str) -> Conclusion | None:
    """Run the official SDK for the recording's dialect; None when it is not installed
    (the request is then made with aiohttp, so the record still appears)."""
    sdk = SDKS.get(recording.dialect)
    try:
        if sdk == "openai":
            return await _openai(recording.name, proxy_url)
        if sdk == "anthropic":
            return await _anthropic(recording.name, proxy_url)
    except ImportError:
        pass
    path = PATHS.get(recording.dialect, "/v1/chat/completions")
    async with aiohttp.ClientSession() as session:
        try:
            async with session.post(
                proxy_url + path,
                json={"model": "demo", "stream": True},
                headers={MOCK_HEADER: recording.name},
            ) as resp:
                await resp.read()
        except aiohttp.ClientError:
            pass
    return None


async def _openai(name: str, proxy_url: str) -> Conclusion:
    import openai

    client = openai.AsyncOpenAI(
        base_url=proxy_url + "/v1",
        api_key="demo",
        max_retries=0,
        timeout=SDK_TIMEOUT,
        default_headers={MOCK_HEADER: name},
    )
    label = f"openai SDK {metadata.version('openai')}"
    text, finish = "", None
    try:
        stream = await client.chat.completions.create(
            model="gpt-demo", messages=[{"role": "user", "content": "demo"}], stream=True
        )
        async for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
    except Exception as exc:  # whatever the SDK raises is the conclusion being shown
        return Conclusion(label, len(text), raised=_exception(exc))
    finally:
        await client.close()
    return Conclusion(label, len(text), finish)


async def _anthropic(name: str, proxy_url: str) -> Conclusion:
    import anthropic

    client = anthropic.AsyncAnthropic(
        base_url=proxy_url,
        api_key="demo",
        max_retries=0,
        timeout=SDK_TIMEOUT,
        default_headers={MOCK_HEADER: name},
    )
    label = f"anthropic SDK {metadata.version('anthropic')}"
    text, finish = "", None
    try:
        stream = await client.messages.create(
            model="claude-demo",
            max_tokens=64,
            messages=[{"role": "user", "content": "demo"}],
            stream=True,
        )
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text += event.delta.text
            elif event.type == "message_delta":
                finish = event.delta.stop_reason or finish
    except Exception as exc:  # whatever the SDK raises is the conclusion being shown
        return Conclusion(label, len(text), raised=_exception(exc))
    finally:
        await client.close()
    return Conclusion(label, len(text), finish)


def _exception(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("type"):
        return f"{type(exc).__name__} ({error['type']}: {error.get('message', '')})"
    message = str(exc).splitlines()[0] if str(exc) else ""
    message = message if len(message) <= 80 else message[:77] + "..."
    return f"{type(exc).__name__}" + (f" ({message})" if message else "")


def predict(recording: Recording, record: dict[str, Any]) -> Conclusion:
    """What the dialect's SDK does with such a stream, from how those SDKs are written: an
    in-band error event raises; a cut connection raises a transport error; anything else,
    [DONE] included, returns normally with whatever finish reason came."""
    sdk = SDKS.get(recording.dialect, "a typical")
    chars = int(record.get("text_chars") or 0)
    state = record.get("state")
    if record.get("error"):
        error = record["error"]
        raised = f"an API error ({error.get('type') or error.get('code')})"
        return Conclusion(f"{sdk} SDK", chars, raised=raised, predicted=True)
    if (
        state == "interrupted"
        and (record.get("interruption") or {}).get("reason") != "end_of_input"
    ):
        return Conclusion(f"{sdk} SDK", chars, raised="a connection error", predicted=True)
    return Conclusion(f"{sdk} SDK", chars, record.get("finish_reason"), predicted=True)


def describe(c: Conclusion, record: dict[str, Any]) -> str:
    """The client's conclusion in plain words, set against the record's state."""
    state = record.get("state")
    lead = f"{c.client} (not installed; what it would do)" if c.predicted else c.client
    verb = (
        ("would raise" if c.predicted else "raised")
        if c.raised
        else ("would return normally" if c.predicted else "returned normally")
    )
    if c.raised:
        what = f"{verb} {c.raised} after {c.chars} chars"
        judgement = "it noticed" if state != "completed" else "on a stream that completed"
        return f"{lead}: {what} — {judgement}"
    what = f"{verb}, finish_reason={c.finish!r}, {c.chars} chars"
    if state == "completed":
        judgement = "correct: the answer is whole"
    elif state == "incomplete":
        judgement = "the answer is truncated; only code that checks finish_reason notices"
    else:
        missed = {
            "interrupted": "the cut",
            "failed": "the failure",
            "unconfirmed": "that no finish reason came",
        }.get(str(state), "anything")
        judgement = f"it did not notice {missed} (sseproxy: {state})"
    return f"{lead}: {what} — {judgement}"
