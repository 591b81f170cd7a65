"""`sseproxy mock`: recorded streams served as a fake upstream, with their recorded chunking and
timing (or faster, or with drill faults), so an app can be tested offline against real
provider streams, forever."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from sseproxy.capture.format import load_capture, recorded_chunks, unfinished
from sseproxy.capture.sessions import is_session_capture
from sseproxy.core import Dialect, EndReason, StreamTap
from sseproxy.core.dialects import detect, spec_for
from sseproxy.core.events import Framing
from sseproxy.core.inject import (
    Close,
    InjectionDisabled,
    InjectionError,
    Injector,
    KeepAlive,
    Pause,
    RawEvents,
    RawMessages,
    Rule,
    Stall,
    Write,
    parse_rules,
)
from sseproxy.core.request import parse_body
from sseproxy.core.sessions import session_spec
from sseproxy.tools.mock_document import document
from sseproxy.tools.mock_session import (
    SessionRecording,
    from_session,
    is_messages_file,
    play_session,
)

MOCK_HEADER = "x-sseproxy-mock"
DEFAULT_LISTEN = "127.0.0.1:8791"
DEFAULT_SPEED = 1.0
INJECT_HEADER = "x-sseproxy-inject"
# A raw body file has no timing: its events are spaced this far apart (before --speed).
RAW_EVENT_INTERVAL_MS = 20.0
DROP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive"}
# A stall drill (silent or keep-alive) holds the connection at most this long, then cuts it.
MAX_STALL_S = 3600.0


def samples_dir() -> Path:
    """The streams bundled with the package, one folder per dialect."""
    return Path(str(resources.files("sseproxy").joinpath("data/samples")))


@dataclass(frozen=True)
class Recording:
    """A stream to serve. `name` is `dialect/stem`, e.g. `openai-chat/max-tokens`."""

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
    dialect = Dialect(sidecar.get("dialect") or Dialect.SSE)  # None: an unfinished capture's
    return Recording(
        name=f"{dialect.value}/{path.stem}",
        dialect=dialect,
        status=sidecar.get("status") or 200,
        headers=headers,
        chunks=list(zip(pieces, times, strict=False)),
        # A body cut, left by its client, or stored only in part (at its cap, or by a proxy
        # that stopped mid-stream) is served cut: the mock cannot make up how it would end.
        http_complete=sidecar.get("http_complete", True) is True
        and not sidecar.get("truncated")
        and not unfinished(sidecar),
        end=sidecar.get("end") or str(EndReason.UPSTREAM_CLOSED),
    )


def from_body(path: Path, dialect: Dialect | None = None) -> Recording:
    """A raw body: one write per event, the tap naming its dialect and whether it was cut."""
    data = path.read_bytes()
    tap = StreamTap(dialect)
    tap.feed(data)
    verdict = tap.close()
    chosen = dialect or verdict.dialect
    spec = spec_for(chosen)
    events = _split_events(data, spec.framing)
    cut = verdict.interruption is not None and verdict.interruption.partial_event_bytes > 0
    content_type = spec.media_type
    return Recording(
        name=f"{chosen.value}/{path.name.split('.', 1)[0]}",
        dialect=chosen,
        status=200,
        headers={"Content-Type": content_type},
        chunks=[(e, i * RAW_EVENT_INTERVAL_MS) for i, e in enumerate(events)],
        http_complete=not cut,
    )


def _split_events(data: bytes, framing: Framing) -> list[bytes]:
    splitter: RawEvents | RawMessages
    if framing is Framing.EVENTSTREAM:
        splitter = RawMessages()
    else:
        splitter = RawEvents(framing is Framing.NDJSON)
    events = splitter.feed(data)
    rest = splitter.rest()
    return [*events, rest] if rest else events


BODY_SUFFIXES = (".sse", ".ndjson", ".jsonl", ".txt", ".eventstream")


def load_recordings(paths: Iterable[Path], dialect: Dialect | None = None) -> list[Recording]:
    """Recordings from files and folders (searched recursively: capture sidecars and body
    files; other files in a folder are skipped). Two recordings with the same name are an
    error naming both files."""
    recordings: list[Recording] = []
    sources: dict[str, Path] = {}
    for path in paths:
        for file, explicit in _files(path):
            if is_messages_file(file) or (file.suffix == ".json" and is_session_capture(file)):
                continue  # a WebSocket session's: `load_sessions` reads it
            if file.suffix == ".json":
                try:
                    recording = from_capture(file)
                except ValueError:
                    if explicit:
                        raise
                    continue  # a folder's other JSON (e.g. a corpus MANIFEST.json)
            elif file.suffix in BODY_SUFFIXES or explicit:
                recording = from_body(file, dialect)
            else:
                continue
            if recording.name in sources:
                raise ValueError(
                    f"two recordings are named {recording.name!r}: "
                    f"{sources[recording.name]} and {file}; rename one"
                )
            sources[recording.name] = file
            recordings.append(recording)
    return recordings


def load_sessions(paths: Iterable[Path]) -> list[SessionRecording]:
    """The WebSocket session captures among `paths` (files and folders, as for streams)."""
    sessions = [
        from_session(file)
        for path in paths
        for file, _ in _files(path)
        if file.suffix == ".json" and is_session_capture(file)
    ]
    twice = sorted(name for name, n in Counter(s.name for s in sessions).items() if n > 1)
    if twice:
        raise ValueError(f"two session captures are named {twice[0]!r}; rename one")
    return sessions


def _files(path: Path) -> Iterable[tuple[Path, bool]]:
    if not path.is_dir():
        yield path, True
        return
    for file in sorted(path.rglob("*")):
        relative = file.relative_to(path).parts
        if file.is_file() and not any(part.startswith(".") for part in relative):
            yield file, False


class MockServer:
    def __init__(
        self,
        recordings: list[Recording],
        speed: float = 1.0,
        allow_inject: bool = False,
        inject: tuple[Rule, ...] = (),
        say: Callable[[str], None] | None = None,
        sessions: Iterable[SessionRecording] = (),
    ) -> None:
        self.sessions = list(sessions)
        if not recordings and not self.sessions:
            raise ValueError("nothing to serve: give capture sidecars or body files")
        self.recordings = recordings
        self.by_name = {r.name: r for r in recordings}
        # A bare stem also names a recording, as long as only one dialect has it.
        stems: dict[str, list[Recording]] = {}
        for r in recordings:
            stems.setdefault(r.name.rpartition("/")[2], []).append(r)
        self.by_stem = {stem: rs[0] for stem, rs in stems.items() if len(rs) == 1}
        self.say = say or _stderr
        self.speed = speed  # 0 means no delay at all
        self.allow_inject = allow_inject
        self.inject = inject
        self._cycles: dict[Dialect | None, Any] = {}
        self._session_cycles: dict[str | None, Any] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def choose(self, request: web.Request) -> Recording | None:
        name = request.headers.get(MOCK_HEADER)
        if name is not None:
            return self.by_name.get(name) or self.by_stem.get(name)
        dialect = detect(request.method, request.path, request.headers)
        pool = [r for r in self.recordings if r.dialect is dialect] or self.recordings
        key = dialect if pool is not self.recordings else None
        if key not in self._cycles:
            self._cycles[key] = itertools.cycle(pool)
        recording: Recording = next(self._cycles[key])
        return recording

    def choose_session(self, request: web.Request) -> SessionRecording | None:
        """The session named by `x-sseproxy-mock` (its `dialect/name`, or a bare name), else
        one of the path's session dialect, round-robin."""
        name = request.headers.get(MOCK_HEADER)
        if name is not None:
            return next(
                (s for s in self.sessions if name in (s.name, s.name.rpartition("/")[2])), None
            )
        dialect = str(session_spec(request.path).dialect)
        pool = [s for s in self.sessions if s.dialect == dialect] or self.sessions
        key = dialect if pool is not self.sessions else None
        if key not in self._session_cycles:
            self._session_cycles[key] = itertools.cycle(pool)
        chosen: SessionRecording = next(self._session_cycles[key])
        return chosen

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.sessions and web.WebSocketResponse().can_prepare(request).ok:
            session = self.choose_session(request)
            if session is None:
                names = sorted(s.name for s in self.sessions)
                return _json(
                    404, {"error": {"type": "sseproxy_mock_unknown_session", "sessions": names}}
                )
            return await play_session(request, session, self.speed, self.say)
        asked = parse_body(await request.read())
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
        if isinstance(asked, dict) and asked.get("stream") is False and recording.status == 200:
            return await self.send_document(request, recording, asked.get("model"))
        try:
            rules = self.inject + self._header_rules(request)
        except InjectionError as exc:
            return _json(
                403 if isinstance(exc, InjectionDisabled) else 400,
                {"error": {"type": "sseproxy_injection", "message": str(exc)}},
            )
        response = web.StreamResponse(status=recording.status, headers=recording.headers)
        try:
            await response.prepare(request)
            clean = await self.play(response, recording, rules)
            if clean:
                await response.write_eof()
            else:
                _cut(request, reset=recording.end == EndReason.UPSTREAM_RESET)
        except (ConnectionError, asyncio.CancelledError) as exc:
            # A client that leaves early is routine for a test upstream: one line, no traceback.
            self.say(
                f"sseproxy mock: the client left {recording.name} after "
                f"{response.body_length} bytes ({type(exc).__name__})"
            )
            if isinstance(exc, asyncio.CancelledError):
                raise
        return response

    async def send_document(
        self, request: web.Request, recording: Recording, model: Any
    ) -> web.StreamResponse:
        """`stream: false`: the recording as its dialect's one JSON document (drills, which
        act on events, do not apply)."""
        data = b"".join(chunk for chunk, _ in recording.chunks)
        doc = document(data, recording.dialect, model if isinstance(model, str) else None)
        if doc is None:
            message = f"no non-streaming form of {recording.dialect} recordings; stream it"
            return _json(400, {"error": {"type": "sseproxy_mock_no_document", "message": message}})
        if not doc.cut:
            return web.Response(status=doc.status, body=doc.body, content_type="application/json")
        response = web.StreamResponse(status=doc.status)
        response.content_type = "application/json"
        await response.prepare(request)
        await response.write(doc.body)
        _cut(request, reset=recording.end == EndReason.UPSTREAM_RESET)
        return response

    def _header_rules(self, request: web.Request) -> tuple[Rule, ...]:
        header = request.headers.get(INJECT_HEADER)
        if header is None:
            return ()
        if not self.allow_inject:
            raise InjectionDisabled(
                f"{INJECT_HEADER} is disabled: start the mock with --allow-inject"
            )
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
            await asyncio.sleep(MAX_STALL_S)  # the client's own timeout is what is being tested
            return False
        elif isinstance(step, KeepAlive):
            await _keep_alive(response, step)
            return False
    return None


async def _keep_alive(response: web.StreamResponse, step: KeepAlive) -> None:
    """Keep-alives only, until the client leaves or MAX_STALL_S passes."""
    interval = step.interval_ms / 1000
    for _ in range(int(MAX_STALL_S / interval)):
        try:
            await response.write(step.data)
        except ConnectionError:
            return  # the client gave up: that is the drill's outcome, not an error
        await asyncio.sleep(interval)


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


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")
