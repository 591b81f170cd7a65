"""WebSocket sessions: connect upstream first, then finish the client's handshake with what
the upstream chose, relay every message both ways in order, and record each turn and the
session.

The client leg is aiohttp's documented `web.WebSocketResponse` with `decode_text=False` (text
arrives as its bytes, never re-decoded), `autoping=False` and `autoclose=False` (pings, pongs
and close frames are relayed, never answered here), no heartbeat. The upstream leg is
`upstream` (websockets' sans-I/O protocol on a connection of our own, opened as the HTTP
leg's are: through the egress proxy when one applies).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog
from aiohttp import WebSocketError, WSCloseCode, WSMsgType, web
from multidict import CIMultiDict

from sseproxy.capture.sessions import SessionCapture
from sseproxy.capture.store import redact_headers
from sseproxy.config import Settings
from sseproxy.core import EndReason, Verdict
from sseproxy.core.sessions import (
    SessionSpec,
    Step,
    TurnJudge,
    TurnResult,
    parse_message,
    session_spec,
)
from sseproxy.core.sessions.drills import End, Send, SessionDrill
from sseproxy.core.sessions.drills import Step as DrillStep
from sseproxy.inspector.endpoints import CONTENT_CHARS, inspected_client, shown_headers
from sseproxy.inspector.sessions import SessionView
from sseproxy.observe.redact import Secrets
from sseproxy.shell import record as records
from sseproxy.shell.admission import Refused, via_entry
from sseproxy.shell.delivery import cap_send_buffer
from sseproxy.shell.forward import REQUEST_ID_HEADER
from sseproxy.shell.ledger import BodyKeys, Ended, Ledger, Links, body_keys
from sseproxy.shell.sinks import deliver, safecall
from sseproxy.shell.state import (
    Answerer,
    Exchange,
    Progress,
    ProxyState,
    RequestFacts,
    Timings,
    new_request_id,
)
from sseproxy.shell.tapping import open_tap, tap_options
from sseproxy.shell.upstream import (
    HOP_BY_HOP,
    REQUEST_DROP,
    UpstreamFailed,
    forwardable,
    upstream_url,
)
from sseproxy.shell.websocket import capture as ws_capture
from sseproxy.shell.websocket.capture import Direction, Kind
from sseproxy.shell.websocket.upstream import (
    MAX_QUEUED_BYTES,
    Control,
    Handshake,
    Item,
    Message,
    UpstreamSocket,
    connect,
    upgrade,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = structlog.get_logger("sseproxy")

# Headers the handshakes make themselves on each hop (websockets upstream, aiohttp downstream).
HANDSHAKE_HEADERS = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-protocol",
        "sec-websocket-extensions",
        "sec-websocket-accept",
        "upgrade",
        "connection",
        "content-length",
        "transfer-encoding",
    }
)
# Seconds the peer that did not close first has to answer a close frame.
CLOSE_TIMEOUT = 10.0
# Ping round-trip times kept per session (the first ones); pings awaiting their pong.
MAX_PING_TIMES = 64
MAX_PINGS_IN_FLIGHT = 64
# A message's name in the session record (a peer's string: bounded).
MAX_NAME_CHARS = 100
# The largest message parsed as JSON and checked as UTF-8 for the judge (and drills): parsing
# is one call that holds the loop (a 127 MiB message of blanks: about a second). A larger one
# is relayed and counted, not judged (anomaly `message_not_judged`); the providers' events
# are far smaller (audio comes in chunks of some KiB).
MAX_JUDGED_BYTES = 4 * 1024 * 1024
NOT_JUDGED = "message_not_judged"
# The session anomaly the shell adds (it sees sessions, the core one at a time).
RECONNECT_LOOP = "reconnect_loop"
# The subprotocol OpenAI's browser clients carry their key in.
KEY_SUBPROTOCOL = "openai-insecure-api-key."
# The kernel's send buffer for the client's socket (SO_SNDBUF; Linux keeps twice it): the
# session's queue, as for HTTP clients. Left alone it grows to tcp_wmem's maximum (4 MiB) for a
# client that stopped reading, and every byte of it is a copy in the kernel made while the loop
# waits: 200 such clients sent 1 MiB messages spent 1.2 s of the loop in `send`.
CLIENT_SEND_BUFFER = MAX_QUEUED_BYTES // 2
# The close both peers get when the proxy stops (RFC 6455 §7.4.1: 1001, "going away"); clients
# reconnect on it (openai-python does on 1001), where a cut (1006) reads as a failure.
GOING_AWAY = 1001
GOING_AWAY_REASON = "sseproxy is stopping"


def _exact_text_frames() -> bool:
    """Whether the running aiohttp hands text frames over as their bytes and sends frames as
    given (`WebSocketResponse(decode_text=False)`, `send_frame`: aiohttp 3.14). Without them a
    relay could not keep a message's bytes exact, so sessions are refused instead."""
    try:
        parameters = inspect.signature(web.WebSocketResponse.__init__).parameters
    except (TypeError, ValueError):
        return False
    return "decode_text" in parameters and hasattr(web.WebSocketResponse, "send_frame")


# Checked once, against the aiohttp this process runs.
SESSIONS_SUPPORTED = _exact_text_frames()


def _tokens(request: web.Request, name: str) -> list[str]:
    return [t.strip() for v in request.headers.getall(name, []) for t in v.split(",") if t.strip()]


def session_secrets(secrets: Secrets, subprotocols: list[str]) -> Secrets:
    """The request's secrets plus a key carried as a subprotocol (OpenAI's browser form)."""
    found = [p for p in subprotocols if p.startswith(KEY_SUBPROTOCOL)]
    found += [p[len(KEY_SUBPROTOCOL) :] for p in found]
    return Secrets(secrets.values + tuple(found)) if found else secrets


@dataclass
class _Clock:
    """One turn's clock readings and facts, for its record."""

    request_id: str
    started_at: float
    timings: Timings
    span: Span | None = None
    keys: BodyKeys | None = None  # its opening message's, to link it as a retry (or retried)


@dataclass
class Session:
    """What one connection did, for the `session.finished` record."""

    spec: SessionSpec
    judge: TurnJudge
    start: float
    messages: Counter[str] = field(default_factory=Counter)
    sizes: Counter[str] = field(default_factory=Counter)
    largest: int = 0
    pings: dict[tuple[str, bytes], float] = field(default_factory=dict)
    ping_ms: list[float] = field(default_factory=list)
    clocks: dict[int, _Clock] = field(default_factory=dict)
    closed_by: str | None = None
    close_code: int | None = None
    close_reason: str = ""
    close_frame: bool = False
    end: EndReason = EndReason.END_OF_INPUT
    client_wait: float = 0.0
    blind: bool = False  # the judge raised: messages are still relayed, no longer judged
    drill: SessionDrill | None = None  # the drill rules that apply to this session
    last_message_delivered: str | None = None  # the last upstream message the client took
    capture: SessionCapture | None = None  # with --capture: every message, for replay and mock
    view: SessionView | None = None  # the inspector's row, fed one entry per message
    turn_now: int | None = None  # the turn the message just judged belongs to
    leaving: Leaving | None = None  # its way out when the proxy stops
    ledger: Ledger | None = None  # links a turn sent again, here or over HTTP (shell/ledger.py)

    @property
    def turns(self) -> int:
        return self.judge.turns

    def closed(self, by: str, code: int | None, reason: str, frame: bool, end: EndReason) -> bool:
        """Note who closed first and how; False when someone already had."""
        if self.closed_by is not None:
            return False
        self.closed_by, self.close_code, self.close_reason = by, code, reason
        self.close_frame, self.end = frame, end
        return True

    def ping(self, direction: str, payload: bytes, now: float) -> None:
        if len(self.pings) < MAX_PINGS_IN_FLIGHT:
            self.pings[(direction, payload)] = now

    def pong(self, direction: str, payload: bytes, now: float) -> None:
        # a pong answers the ping that travelled the other way
        sent = self.pings.pop(("u" if direction == "c" else "c", payload), None)
        if sent is not None and len(self.ping_ms) < MAX_PING_TIMES:
            self.ping_ms.append(round((now - sent) * 1000, 3))


class Leaving:
    """A session's way out when the proxy stops: close 1001 sent to both peers, at once when
    no turn is open (or when `now`: the grace is over), else as soon as its open turns end.
    The closing handshakes are then awaited by the session, within the proxy's cut."""

    def __init__(self, ws: web.WebSocketResponse, up: UpstreamSocket, s: Session) -> None:
        self.ws, self.up, self.s = ws, up, s
        self.task = asyncio.current_task()  # the session's handler
        self.asked = False
        self.closing: asyncio.Task[None] | None = None

    def go_away(self, now: bool) -> None:
        self.asked = True
        turn_open = bool(self.s.judge.open) and not self.s.blind
        if self.closing is None and (now or not turn_open):
            self.closing = asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        s = self.s
        if not s.closed("proxy", GOING_AWAY, GOING_AWAY_REASON, True, EndReason.PROXY_SHUTDOWN):
            return  # a peer closed first: that closing handshake is under way
        await asyncio.gather(
            self.up.send(Control("close", code=GOING_AWAY, reason=GOING_AWAY_REASON)),
            _close_client(self.ws, GOING_AWAY, GOING_AWAY_REASON),
        )

    def stop(self) -> None:
        if self.closing is not None and not self.closing.done():
            self.closing.cancel()


def sessions_go_away(state: ProxyState, now: bool) -> set[asyncio.Task[Any]]:
    """The proxy stops: every open session closes with 1001 both ways (`now`: also those with a
    turn open). Returns the sessions' handler tasks, which end once both peers answered."""
    tasks: set[asyncio.Task[Any]] = set()
    for leaving in list(state.sessions.values()):
        leaving.go_away(now)
        if leaving.task is not None:
            tasks.add(leaving.task)
    return tasks


async def session(
    request: web.Request,
    x: Exchange,
    state: ProxyState,
    settings: Settings,
    ledger: Ledger | None = None,
) -> web.StreamResponse:
    """Relay one WebSocket session; every record is written before this returns. `ledger`:
    link a turn sent again (on this connection, another, or over HTTP) to the one it repeats."""
    if not SESSIONS_SUPPORTED:
        raise Refused(
            501,
            "websocket_unsupported",
            f"WebSocket sessions need aiohttp 3.14 or newer; this proxy runs {aiohttp.__version__}",
        )
    facts = x.facts
    assert facts.route is not None
    try:
        url = upstream_url(facts.route, request.raw_path)  # scheme, host, port from the route
    except ValueError as exc:
        raise Refused(400, "bad_target", str(exc)) from exc
    subprotocols = _tokens(request, "Sec-WebSocket-Protocol")
    deflate = any(
        t.split(";")[0].strip().lower() == "permessage-deflate"
        for t in _tokens(request, "Sec-WebSocket-Extensions")
    )
    x.facts = facts = dataclasses.replace(
        facts, secrets=session_secrets(facts.secrets, subprotocols)
    )
    headers = forwardable(request.headers, REQUEST_DROP | HANDSHAKE_HEADERS)
    via = request.headers.getall("Via", ())
    headers["Via"] = ", ".join([*via, via_entry(state)]) if via else via_entry(state)
    if state.tracing is not None:  # the session's span; each turn's is its child
        x.progress.span = state.tracing.start(request.headers, headers, "GET", facts.path)
    raw = [(k.encode(), v.encode("utf-8", "surrogateescape")) for k, v in headers.items()]
    limit = settings.max_ws_message_bytes
    protocol, wire = upgrade(url, subprotocols, deflate, raw, limit)
    assert state.pool is not None
    try:
        upstream, handshake = await connect(
            state.pool, url, protocol, wire, settings.connect_timeout, state.ws_held, limit
        )
    except (UpstreamFailed, OSError) as exc:  # OSError: ConnectionError, TimeoutError
        why = (exc.cause if isinstance(exc, UpstreamFailed) else str(exc)) or type(exc).__name__
        raise Refused(
            502,
            "upstream_unreachable",
            f"no WebSocket connection to {url.host}: {why}"[:300],
            end=EndReason.UPSTREAM_UNREACHABLE,
        ) from None
    x.progress.timings.headers = time.monotonic()
    x.progress.status, x.progress.answered_by = handshake.status, Answerer.UPSTREAM
    if handshake.status != 101:
        return await _rejected(request, x, handshake)
    spec = session_spec(request.path)
    # text is counted, and kept only for the inspector's content view when asked for
    judge = spec.judge(CONTENT_CHARS if settings.keep_content else 0, request.raw_path)
    s = Session(spec, judge, facts.start, ledger=ledger)
    drill = SessionDrill(facts.inject_rules, spec.dialect)
    s.drill = drill if drill.active else None
    route = facts.route.name if facts.route else None
    nonce = request.headers.get("Sec-WebSocket-Key")  # a "key" by name, new per connection
    credentials = tuple(v for v in facts.secrets.values if v != nonce)
    if state.reconnects.opened(route, credentials, time.monotonic()):
        s.judge.anomalies[RECONNECT_LOOP] += 1
    ws = web.WebSocketResponse(
        protocols=(handshake.subprotocol,) if handshake.subprotocol else (),
        autoping=False,
        autoclose=False,
        compress=deflate,
        # aiohttp refuses a frame of exactly `max_msg_size` bytes: the limit is inclusive here
        max_msg_size=limit + 1,
        decode_text=False,
        timeout=CLOSE_TIMEOUT,
    )
    for name, value in _copied(handshake.headers):
        ws.headers.add(name, value)
    ws.headers[REQUEST_ID_HEADER] = facts.request_id
    x.progress.upgraded = True
    s.leaving = leaving = Leaving(ws, upstream, s)
    try:
        await ws.prepare(request)
        if request.transport is not None:
            cap_send_buffer(request.transport, CLIENT_SEND_BUFFER)
        s.capture = ws_capture.start(
            state, x, str(spec.dialect), handshake.subprotocol, handshake.headers, time.monotonic()
        )
        _inspected(state, x, s, handshake, bool(ws.compress))
        both = (
            _from_client(ws, upstream, s, state, x),
            _from_upstream(request, ws, upstream, s, state, x),
        )
        pumps = asyncio.gather(*(_peer_may_leave(d, upstream, s) for d in both))
        state.sessions[facts.request_id] = leaving
        if state.shutting_down:  # opened as the proxy began to stop
            leaving.go_away(now=False)
        await pumps
        if leaving.closing is not None:
            await leaving.closing  # the client's answer to our 1001
    except asyncio.CancelledError:  # the client's connection was lost, or the proxy stops
        end = EndReason.PROXY_SHUTDOWN if state.shutting_down else EndReason.CLIENT_DISCONNECTED
        s.closed("proxy" if state.shutting_down else "client", None, "", False, end)
        upstream.abort()
        raise
    finally:
        state.sessions.pop(facts.request_id, None)
        leaving.stop()
        upstream.abort()
        upstream.forget()
        state.memory.ended()
        try:
            await state.steps.wait()  # as many records at once (200 clients that left together)
        finally:  # written even when cancelled meanwhile
            for result in s.judge.close(s.end, s.close_code, s.close_reason):
                _turn_record(state, x, s, result)
            _session_record(state, x, s, handshake, bool(ws.compress))
    return ws


async def _peer_may_leave(direction: Awaitable[None], up: UpstreamSocket, s: Session) -> None:
    """A write to a client that has gone (a reset mid-message) ends the session as its
    leaving: mirrored upstream without a close frame, never the proxy's error."""
    try:
        await direction
    except ConnectionError:
        s.closed("client", None, "", False, EndReason.CLIENT_DISCONNECTED)
        up.abort()
    except asyncio.CancelledError as exc:
        # The session's task keeps this error, and its traceback the frames it left, until
        # the cyclic collector runs (rarely: server.GC_THRESHOLDS); those frames hold the
        # message being written (1 MiB each for 200 stalled clients). Their locals go now.
        traceback.clear_frames(exc.__traceback__)
        raise


def _copied(headers: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    skip = HOP_BY_HOP | HANDSHAKE_HEADERS
    out = []
    for name, value in headers:
        text = name.decode("latin-1")
        if text.lower() not in skip:
            out.append((text, value.decode("latin-1")))
    return out


async def _rejected(request: web.Request, x: Exchange, handshake: Handshake) -> web.Response:
    """The upstream refused the upgrade: its status, headers and body, as they were."""
    headers: CIMultiDict[str] = CIMultiDict(_copied(handshake.headers))
    headers[REQUEST_ID_HEADER] = x.facts.request_id
    content_type = headers.get("Content-Type")
    x.progress.content_type = content_type
    x.progress.response_headers = dict(headers)
    tap = open_tap(None, content_type, None, tap_options(1 << 20, 0), x.facts.asked)
    tap.feed(handshake.body)
    x.progress.tap = tap
    x.progress.http_complete = True
    response = web.Response(status=handshake.status, body=handshake.body, headers=headers)
    response.force_close()
    return response


async def _from_client(
    ws: web.WebSocketResponse, up: UpstreamSocket, s: Session, state: ProxyState, x: Exchange
) -> None:
    while True:
        msg = await ws.receive()
        now = time.monotonic()
        kind = msg.type
        if kind in (WSMsgType.TEXT, WSMsgType.BINARY):
            data = msg.data if isinstance(msg.data, bytes) else bytes(msg.data)
            _count(s, "client", len(data))
            text = kind is WSMsgType.TEXT
            name = _judged(state, x, s, "client", data, now, text)
            side = Kind.TEXT if text else Kind.BINARY
            ws_capture.note(state, s.capture, Direction.CLIENT, side, data, now, name)
            _seen(state, s, Direction.CLIENT, side, data, name, now)
            await up.send(Message(text, data))  # text: its bytes, as they came
        elif kind is WSMsgType.PING:
            payload = bytes(msg.data)
            s.ping("c", payload, now)
            ws_capture.note(state, s.capture, Direction.CLIENT, Kind.PING, payload, now)
            _seen(state, s, Direction.CLIENT, Kind.PING, payload, None, now)
            await up.send(Control("ping", payload))
        elif kind is WSMsgType.PONG:
            payload = bytes(msg.data)
            s.pong("c", payload, now)
            ws_capture.note(state, s.capture, Direction.CLIENT, Kind.PONG, payload, now)
            _seen(state, s, Direction.CLIENT, Kind.PONG, payload, None, now)
            await up.send(Control("pong", payload))
        elif kind is WSMsgType.CLOSE:
            code = msg.data or None
            reason = msg.extra or ""
            ws_capture.close(state, s.capture, Direction.CLIENT, code, reason, now)
            close = str(code) if code else None
            _seen(state, s, Direction.CLIENT, Kind.CLOSE, reason.encode(), close, now)
            if s.closed("client", code, reason, True, EndReason.CLIENT_DISCONNECTED):
                await up.send(Control("close", code=code, reason=reason if code else ""))
            return
        elif kind is WSMsgType.CLOSING:
            return  # our own close (relaying the upstream's) is under way
        else:  # CLOSED or ERROR: the client went without a close frame, or sent too much
            error = msg.data if kind is WSMsgType.ERROR else None
            if isinstance(error, WebSocketError) and error.code == WSCloseCode.MESSAGE_TOO_BIG:
                s.closed("proxy", 1009, "message too big", True, EndReason.CLIENT_DISCONNECTED)
                await up.send(Control("close", code=1009, reason="message too big"))
            else:
                s.closed("client", None, "", False, EndReason.CLIENT_DISCONNECTED)
                up.abort()
            return


async def _from_upstream(
    request: web.Request,
    ws: web.WebSocketResponse,
    up: UpstreamSocket,
    s: Session,
    state: ProxyState,
    x: Exchange,
) -> None:
    item: Item = None
    while True:
        item = None  # (the last message is not kept while the next is awaited)
        if s.closed_by is not None and s.closed_by != "upstream":
            try:  # the client (or the proxy) closed: the upstream's answer ends the session
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    item = await up.next()
            except TimeoutError:
                return
        else:
            item = await up.next()
        now = time.monotonic()
        if isinstance(item, Message):
            if await _upstream_message(request, ws, up, s, state, x, item, now):
                return
        elif isinstance(item, Control) and item.kind == "ping":
            s.ping("u", item.payload, now)
            ws_capture.note(state, s.capture, Direction.UPSTREAM, Kind.PING, item.payload, now)
            _seen(state, s, Direction.UPSTREAM, Kind.PING, item.payload, None, now)
            await ws.ping(item.payload)
        elif isinstance(item, Control) and item.kind == "pong":
            s.pong("u", item.payload, now)
            ws_capture.note(state, s.capture, Direction.UPSTREAM, Kind.PONG, item.payload, now)
            _seen(state, s, Direction.UPSTREAM, Kind.PONG, item.payload, None, now)
            await ws.pong(item.payload)
        elif isinstance(item, Control):  # the close frame
            ws_capture.close(state, s.capture, Direction.UPSTREAM, item.code, item.reason, now)
            code = str(item.code) if item.code else None
            _seen(state, s, Direction.UPSTREAM, Kind.CLOSE, (item.reason or "").encode(), code, now)
            if s.closed_by is None:
                # (websockets echoed the close to the upstream as it came)
                s.closed("upstream", item.code, item.reason, True, EndReason.UPSTREAM_CLOSED)
                await _close_client(ws, item.code, item.reason)
            elif s.closed_by == "client":
                # the upstream's answer to the client's close goes back to the client
                await _close_client(ws, item.code, item.reason)
            return
        else:  # the connection ended without a close frame
            if s.closed_by is None:
                if up.too_big:
                    s.closed("proxy", 1009, "message too big", True, EndReason.UPSTREAM_CLOSED)
                    await ws.close(code=1009, message=b"message too big")
                    return
                s.closed("upstream", None, "", False, EndReason.UPSTREAM_RESET)
                transport = request.transport
                if transport is not None:
                    transport.abort()  # mirrored: the client sees no close frame either
            return


async def _upstream_message(
    request: web.Request,
    ws: web.WebSocketResponse,
    up: UpstreamSocket,
    s: Session,
    state: ProxyState,
    x: Exchange,
    item: Message,
    now: float,
) -> bool:
    """Relay one upstream message (a drill may change it); True when a drill ended the
    session. Its own function so that nothing refers to the message once it was written."""
    _count(s, "upstream", len(item.data))
    for step in _drilled(state, s, item):
        if isinstance(step, End):
            await _drill_end(request, ws, up, s, step)
            return True
        name = _judged(state, x, s, "upstream", step.data, now, step.text)
        side = Kind.TEXT if step.text else Kind.BINARY
        ws_capture.note(state, s.capture, Direction.UPSTREAM, side, step.data, now, name)
        if s.closed_by is None:
            _seen(state, s, Direction.UPSTREAM, side, step.data, name, now)
            await ws.send_frame(step.data, WSMsgType.TEXT if step.text else WSMsgType.BINARY)
            s.client_wait += time.monotonic() - now
            s.last_message_delivered = name
    return False


def _drilled(state: ProxyState, s: Session, item: Message) -> Sequence[DrillStep]:
    """What the client gets for `item`: itself, unless a drill says otherwise."""
    drill = s.drill
    if drill is not None:
        try:
            obj = parse_message(item.data) if len(item.data) <= MAX_JUDGED_BYTES else None
            return drill.message(obj, item.data, item.text)
        except Exception:  # a bug in the drill: the session goes on undrilled
            s.drill = None
            safecall(state, "log", lambda: log.exception("session.drill_error"))
    return (Send(item.data, item.text),)


async def _drill_end(
    request: web.Request, ws: web.WebSocketResponse, up: UpstreamSocket, s: Session, end: End
) -> None:
    """A drill ends the session as a provider would: a close frame, or none at all."""
    if end.code is None:
        s.closed("proxy", None, "", False, EndReason.UPSTREAM_RESET)
        transport = request.transport
        if transport is not None:
            transport.abort()
    else:
        s.closed("proxy", end.code, end.reason, True, EndReason.UPSTREAM_CLOSED)
        await _close_client(ws, end.code, end.reason)
    up.abort()


async def _close_client(ws: web.WebSocketResponse, code: int | None, reason: str) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        if code is None:  # a close frame without a status, relayed as one
            await ws.send_frame(b"", WSMsgType.CLOSE)
        else:
            await ws.close(code=code, message=reason.encode())


def _inspected(
    state: ProxyState, x: Exchange, s: Session, handshake: Handshake, client_deflate: bool
) -> None:
    """The session's row in the inspector, fed by `_seen` and ended by its record."""

    def start() -> None:
        facts, secrets = x.facts, x.facts.secrets
        upstream_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in handshake.headers}
        view = SessionView(
            facts.request_id,
            facts.path,
            facts.started_at,
            time.monotonic(),
            route=facts.route.name if facts.route else None,
            dialect=str(s.spec.dialect),
            subprotocol=handshake.subprotocol,
            extensions=_extensions(client_deflate, handshake),
            request_headers=shown_headers(redact_headers(facts.headers, secrets)),
            response_headers=shown_headers(redact_headers(upstream_headers, secrets)),
            secrets=secrets,
            live=s,
        )
        view.run_id, view.client = inspected_client(facts.headers)
        state.inspector.session_started(view)
        s.view = view

    safecall(state, "inspector", start)


def _seen(
    state: ProxyState,
    s: Session,
    direction: str,
    kind: Kind,
    data: bytes,
    name: str | None,
    now: float,
) -> None:
    """One message for the inspector: a bounded entry, never a delay or an error here."""
    view = s.view
    if view is not None:
        turn = s.turn_now if kind in (Kind.TEXT, Kind.BINARY) else None
        safecall(
            state,
            "inspector",
            lambda: view.message(now, direction, kind, len(data), name, turn, data),
        )


def _extensions(client_deflate: bool, handshake: Handshake) -> dict[str, list[str]]:
    return {
        "client": ["permessage-deflate"] if client_deflate else [],
        "upstream": handshake.extensions,
    }


def _count(s: Session, direction: str, size: int) -> None:
    s.messages[direction] += 1
    s.sizes[direction] += size
    s.largest = max(s.largest, size)


def _judged(
    state: ProxyState, x: Exchange, s: Session, side: str, data: bytes, now: float, text: bool
) -> str | None:
    """Feed the judge; a bug there costs the session its judging, never a message. Returns
    the message's name for `last_message_delivered`: its `type`, or its first key (Gemini)."""
    s.turn_now = None
    if s.blind:
        return None
    if len(data) > MAX_JUDGED_BYTES:
        s.judge.anomalies[NOT_JUDGED] += 1
        return None
    try:
        obj = parse_message(data)
        step = s.judge.client(obj) if side == "client" else s.judge.upstream(obj, data)
        if text:
            s.judge.text(data)
    except Exception:
        s.blind = True
        s.judge.anomalies["core_error"] += 1
        safecall(state, "log", lambda: log.exception("session.core_error"))
        return None
    _steps(state, x, s, step, now)
    if side == "client" and step.opened and s.ledger is not None:
        _keep_keys(state, x, s, step.opened, data, obj)
    if not isinstance(obj, dict) or not obj:
        return None
    name = obj.get("type")
    return (name if isinstance(name, str) else str(next(iter(obj))))[:MAX_NAME_CHARS]


def _keep_keys(
    state: ProxyState, x: Exchange, s: Session, opened: list[int], data: bytes, obj: Any
) -> None:
    """The digests of the message that opened these turns (a `response.create`, `obj` as
    parsed), for the ledger; a failure costs the link, never the message."""
    try:
        keys = body_keys(x.facts.method, x.facts.path, data, websocket=True, parsed=obj)
    except Exception:
        safecall(state, "log", lambda: log.exception("session.ledger_error"))
        return
    for number in opened:
        clock = s.clocks.get(number)
        if clock is not None:
            clock.keys = keys


def _linked(
    state: ProxyState, s: Session, facts: RequestFacts, clock: _Clock, verdict: Verdict
) -> Links:
    """Link a turn to the one it repeats, then keep it for a later retry (HTTP's or another
    turn's); a failure costs the link, never the record."""
    if s.ledger is None or clock.keys is None:
        return Links()
    ended = Ended(
        request_id=facts.request_id,
        started=clock.timings.start,
        method=facts.method,
        path=facts.path,
        headers={},  # a turn resumes nothing
        body=b"",
        route=facts.route.name if facts.route else None,
        session_id=None,
        state=verdict.state,
        response_id=verdict.response_id,
        events=(),
        delivered=0,
        retry_ms=None,
        text=None,
        websocket=True,
        keys=clock.keys,
    )
    try:
        return s.ledger.link(ended, time.monotonic())
    except Exception:
        safecall(state, "log", lambda: log.exception("session.ledger_error"))
        return Links()


def _steps(state: ProxyState, x: Exchange, s: Session, step: Step, now: float) -> None:
    for number in step.opened:
        span = None
        if state.tracing is not None and x.progress.span is not None:
            name = f"{s.spec.dialect} turn {number}"
            span = state.tracing.start_child(x.progress.span, name)
        s.clocks[number] = _Clock(new_request_id(), time.time(), Timings(now, headers=now), span)
    if step.deltas:
        for clock in s.clocks.values():
            clock.timings.chunk(now, now, step.deltas)
    for result in step.ended:
        _turn_record(state, x, s, result)
    if step.ended and s.leaving is not None and s.leaving.asked:
        s.leaving.go_away(now=False)  # the proxy is stopping: the last open turn has ended
    # the turn this message belongs to: the one it opened or ended, else the newest open one
    if step.opened:
        s.turn_now = step.opened[-1]
    elif step.ended:
        s.turn_now = step.ended[-1].number
    else:
        s.turn_now = max(s.clocks, default=None)


def _turn_record(state: ProxyState, x: Exchange, s: Session, result: TurnResult) -> None:
    """One `request.finished` record per turn, written when the turn ends."""
    clock = s.clocks.pop(result.number, None) or _Clock(
        new_request_id(), time.time(), Timings(time.monotonic())
    )
    facts = dataclasses.replace(
        x.facts, request_id=clock.request_id, started_at=clock.started_at, start=clock.timings.start
    )
    progress = Progress(
        clock.timings, status=result.status or 101, span=clock.span, answered_by=Answerer.UPSTREAM
    )
    verdict = result.verdict
    links = _linked(state, s, facts, clock, verdict)
    try:
        record, rendered = records.build_rendered(
            facts,
            progress,
            verdict,
            links=links,
            extra=records.turn_fields(x.facts.request_id, s.spec, result),
        )
    except Exception as exc:
        record, rendered = records.fallback(facts, progress, exc), None
    deliver(state, facts, progress, verdict, record, rendered)
    ws_capture.turn(state, s.capture, record)


def _session_record(
    state: ProxyState,
    x: Exchange,
    s: Session,
    handshake: Handshake,
    client_deflate: bool,
) -> None:
    """One `session.finished` record per connection, built and delivered as a request's is."""
    end = records.SessionEnd(
        dialect=str(s.spec.dialect),
        subprotocol=handshake.subprotocol,
        extensions=_extensions(client_deflate, handshake),
        close_code=s.close_code,
        close_reason=s.close_reason,
        closed_by=s.closed_by,
        close_frame=s.close_frame,
        end=s.end,
        duration_s=time.monotonic() - s.start,
        messages=s.messages,
        sizes=s.sizes,
        largest_message_bytes=s.largest,
        ping_ms=s.ping_ms,
        client_wait_s=s.client_wait,
        last_message_delivered=s.last_message_delivered,
    )
    record = records.build_session(x.facts, end, s.judge)
    deliver(state, x.facts, x.progress, None, record)
    ws_capture.save(state, x, s.capture, str(s.end), handshake.headers, record)
