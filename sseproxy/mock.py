"""`sseproxy mock`: recorded streams served as a fake upstream, with their recorded chunking and
timing (or faster, or with drill faults), so an app can be tested offline against real
provider streams, forever."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from .capture import load_capture, recorded_chunks
from .core import Dialect, EndReason, StreamTap
from .core.dialects import detect
from .core.inject import (
    Close,
    InjectionError,
    Injector,
    Pause,
    Rule,
    Stall,
    Write,
    parse_rules,
    raw_splitter,
)

MOCK_HEADER = "x-sseproxy-mock"
INJECT_HEADER = "x-sseproxy-inject"
# A raw body file has no timing: its events are spaced this far apart (before --speed).
RAW_EVENT_INTERVAL_MS = 20.0
CONTENT_TYPES = {
    Dialect.OLLAMA: "application/x-ndjson",
    Dialect.BEDROCK_CONVERSE: "application/vnd.amazon.eventstream",
    Dialect.BEDROCK_INVOKE: "application/vnd.amazon.eventstream",
}
DROP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive"}


@dataclass(frozen=True)
class Recording:
    name: str
    dialect: Dialect
    status: int
    headers: dict[str, str]
    chunks: list[tuple[bytes, float]]  # bytes and the time they arrived, in ms from the start
    http_complete: bool = True
    end: str = str(EndReason.UPSTREAM_CLOSED)


def from_capture(path: Path) -> Recording:
    sidecar, body = load_capture(path)
    pieces = recorded_chunks(sidecar, body)
    times = [t for _, _, t in sidecar["chunks"]] + [0.0] * len(pieces)
    headers = {
        k: v
        for k, v in sidecar.get("response_headers", {}).items()
        if k.lower() not in DROP_HEADERS
    }
    return Recording(
        name=path.stem,
        dialect=Dialect(sidecar["dialect"]),
        status=sidecar.get("status") or 200,
        headers=headers,
        chunks=list(zip(pieces, times, strict=False)),
        http_complete=sidecar.get("http_complete", True),
        end=sidecar.get("end") or str(EndReason.UPSTREAM_CLOSED),
    )


def from_body(path: Path, dialect: Dialect | None = None) -> Recording:
    """A raw body: one write per event, the tap naming its dialect and whether it was cut."""
    data = path.read_bytes()
    tap = StreamTap(dialect)
    tap.feed(data)
    verdict = tap.close()
    chosen = dialect or verdict.dialect
    events = _split_events(data, chosen)
    cut = verdict.interruption is not None and verdict.interruption.partial_event_bytes > 0
    content_type = CONTENT_TYPES.get(chosen, "text/event-stream")
    return Recording(
        name=path.name.split(".", 1)[0],
        dialect=chosen,
        status=200,
        headers={"Content-Type": content_type},
        chunks=[(e, i * RAW_EVENT_INTERVAL_MS) for i, e in enumerate(events)],
        http_complete=not cut,
    )


def _split_events(data: bytes, dialect: Dialect) -> list[bytes]:
    splitter = raw_splitter(dialect, False)
    events = splitter.feed(data)
    rest = splitter.rest()
    return [*events, rest] if rest else events


def load_recordings(paths: Iterable[Path], dialect: Dialect | None = None) -> list[Recording]:
    recordings: list[Recording] = []
    for path in paths:
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        for file in files:
            if file.name.startswith("."):
                continue
            if file.suffix == ".json":
                recordings.append(from_capture(file))
            elif (
                file.suffix in (".sse", ".ndjson", ".jsonl", ".txt", ".eventstream")
                or not path.is_dir()
            ):
                recordings.append(from_body(file, dialect))
    return recordings


class MockServer:
    def __init__(
        self,
        recordings: list[Recording],
        speed: float = 1.0,
        allow_inject: bool = False,
        inject: tuple[Rule, ...] = (),
    ) -> None:
        if not recordings:
            raise ValueError("nothing to serve: give capture sidecars or body files")
        self.recordings = recordings
        self.by_name = {r.name: r for r in recordings}
        self.speed = speed  # 0 means no delay at all
        self.allow_inject = allow_inject
        self.inject = inject
        self._cycles: dict[Dialect | None, Any] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def choose(self, request: web.Request) -> Recording | None:
        name = request.headers.get(MOCK_HEADER)
        if name is not None:
            return self.by_name.get(name)
        dialect = detect(request.method, request.path, request.headers)
        pool = [r for r in self.recordings if r.dialect is dialect] or self.recordings
        key = dialect if pool is not self.recordings else None
        if key not in self._cycles:
            self._cycles[key] = itertools.cycle(pool)
        recording: Recording = next(self._cycles[key])
        return recording

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        recording = self.choose(request)
        if recording is None:
            return _json(
                404,
                {
                    "error": {
                        "type": "sseproxy_mock_unknown_stream",
                        "streams": sorted(self.by_name),
                    }
                },
            )
        try:
            rules = self.inject + self._header_rules(request)
        except InjectionError as exc:
            return _json(
                403 if "disabled" in str(exc) else 400,
                {"error": {"type": "sseproxy_injection", "message": str(exc)}},
            )
        response = web.StreamResponse(status=recording.status, headers=recording.headers)
        await response.prepare(request)
        clean = await self.play(response, recording, rules)
        if clean:
            await response.write_eof()
        else:
            _cut(request, reset=recording.end == EndReason.UPSTREAM_RESET)
        return response

    def _header_rules(self, request: web.Request) -> tuple[Rule, ...]:
        header = request.headers.get(INJECT_HEADER)
        if header is None:
            return ()
        if not self.allow_inject:
            raise InjectionError(f"{INJECT_HEADER} is disabled: start the mock with --allow-inject")
        return parse_rules(header)

    async def play(
        self, response: web.StreamResponse, recording: Recording, rules: tuple[Rule, ...]
    ) -> bool:
        """Send the recording; True when the HTTP body may end cleanly."""
        injector = Injector(rules, recording.dialect) if rules else None
        last = 0.0
        for data, at in recording.chunks:
            if self.speed:
                await asyncio.sleep(max(0.0, (at - last) / 1000 / self.speed))
            last = at
            steps = injector.feed(data) if injector else [Write(data)]
            outcome = await _perform(response, steps)
            if outcome is not None:
                return outcome
            if injector is not None and injector.done:
                return True
        if injector is not None:
            outcome = await _perform(response, injector.finish())
            if outcome is not None:
                return outcome
        return recording.http_complete


async def _perform(response: web.StreamResponse, steps: list[Any]) -> bool | None:
    for step in steps:
        if isinstance(step, Write):
            await response.write(step.data)
        elif isinstance(step, Pause):
            await asyncio.sleep(step.milliseconds / 1000)
        elif isinstance(step, Close):
            return False
        elif isinstance(step, Stall):
            await asyncio.sleep(3600)  # the client's own timeout is what is being tested
            return False
    return None


def _cut(request: web.Request, reset: bool) -> None:
    transport: Any = request.transport
    if transport is None:
        return
    if reset:
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")
