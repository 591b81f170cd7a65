"""A fake LLM provider on loopback, in its own thread: it answers like the providers do, HTTP
event streams and WebSocket sessions alike, so the installed proxy can sit in front of it.

What it does is chosen by the model name the client asks for: `<scenario>-<anything>`, with
`ok` (a whole recorded stream), `cut` (closes the connection mid-stream), `hold` (sends a few
events, then keeps the stream or session open until the peer goes), `overloaded` (Anthropic:
an in-band error after HTTP 200), `failed` (Gemini Interactions: the interaction ends
`failed`). For the coding agents (tests/agents, replies in
agent_replies.py): `answer` (a whole text answer), `tool` (a shell tool call, then the answer
once the agent sends its result), `error` (an in-band error after HTTP 200), `ratelimit` (429
the first time a model is asked for, the answer after), `cutonce` (a cut the first time, the
answer after). Every request and WebSocket `response.create` is kept in `requests`. The
model name also tells each test's records apart: every test asks for a model of its own. A
thread, not the test's loop: one fake serves all the tests of a session, whichever loop each
test runs on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.corpus import file as corpus
from tests.product import agent_replies as agent
from tests.product.agent_replies import anthropic_overloaded
from tests.streams import chat_chunk, sse

# How long a held stream or session waits for its peer to go before it gives up by itself.
HOLD_SECONDS = 120.0
# The bodies the `ok` scenario replays, by API.
CHAT_BODY = "openai-chat/basic-text-no-usage.sse"
RESPONSES_BODY = "openai-responses/text-basic.sse"
MESSAGES_BODY = "anthropic-messages/text-basic-pings.sse"
GEMINI_BODY = "gemini/cjk-poem-stop-every-chunk.sse"
# The events a held Chat stream sends before it holds: what a client and a capture get.
HELD_CHAT_EVENTS = (chat_chunk("Hel"), chat_chunk("lo, "), chat_chunk("wor"))
CHUNK = 37  # bytes per write of a replayed body: events split across reads, as on the wire


# Codex signed in with ChatGPT asks which backend its account's workspace is on before its
# first turn (and gives up without an answer): the account it sends, on chatgpt.com itself.
ACCOUNTS_CHECK = "/backend-api/wham/accounts/check"


def chatgpt_accounts(account: str | None) -> dict[str, Any]:
    entry = {
        "id": account or "",
        "plan_type": "plus",
        "workspace_backend_origin": "https://chatgpt.com",
        "account_routing_override": "NO_CONSTRAINT",
    }
    return {"accounts": [entry], "account_ordering": [entry["id"]]}


def scenario(model: str | None) -> str:
    return (model or "ok").removeprefix("models/").split("-", 1)[0]


def events_of(body: bytes) -> list[bytes]:
    """The body's events, each with its blank line (the corpus files are LF or CRLF)."""
    sep = b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n"
    parts = body.split(sep)
    return [p + sep for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def interaction_events(model: str, status: str) -> bytes:
    """A streamed Gemini interaction, written from google-genai's own event models (3.6): two
    text deltas, then `interaction.completed` with `status` and no outputs (as the API sends)."""
    from google.genai import interactions as t

    interaction = {"id": "v1_fake", "status": "in_progress", "model": model}
    step = {"type": "model_output", "content": []}
    events = [
        t.InteractionCreatedEvent(interaction=interaction, event_id="e1"),
        t.StepStart(index=0, step=step, event_id="e2"),
        t.StepDelta(index=0, delta={"type": "text", "text": "Hello"}, event_id="e3"),
        t.StepDelta(index=0, delta={"type": "text", "text": ", world"}, event_id="e4"),
        t.StepStop(index=0, event_id="e5"),
        t.InteractionStatusUpdate(interaction_id="v1_fake", status=status, event_id="e6"),
        t.InteractionCompletedEvent(
            interaction={**interaction, "status": status, "steps": []}, event_id="e7"
        ),
    ]
    out = b""
    for event in events:
        obj = event.model_dump(mode="json", by_alias=True, exclude_none=True)
        out += f"event: {obj['event_type']}\ndata: {json.dumps(obj)}\n\n".encode()
    return out


@dataclass
class WsSeen:
    """One WebSocket session as the fake saw it."""

    path: str
    received: list[str] = field(default_factory=list)
    close_code: int | None = None  # the code of the close frame the proxy sent, if any
    request: web.Request | None = None
    ended: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Seen:
    """One request (or WebSocket `response.create`) as the fake got it."""

    transport: str  # "http" or "websocket"
    path: str
    model: str | None
    headers: dict[str, str]
    body: bytes


WsScript = Callable[[web.WebSocketResponse, WsSeen, str], Awaitable[None]]
AGENT_SCENARIOS = ("answer", "tool", "error", "ratelimit", "cutonce")


class FakeProvider:
    """Start with `start()`, stop with `stop()`; `url` is its base URL."""

    def __init__(self) -> None:
        self.url = ""
        self.sessions: dict[str, WsSeen] = {}  # by the model (or ?id=) each session asked for
        self.requests: list[Seen] = []
        self._asked: dict[str, int] = {}  # times each model was asked for (ratelimit, cutonce)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()

        async def setup() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self.handle)
            self._runner = web.AppRunner(app, shutdown_timeout=1.0)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(setup())
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-provider", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake provider did not start within 10 s")

    def stop(self) -> None:
        loop, runner = self._loop, self._runner
        if loop is None or runner is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        loop.close()

    def session(self, key: str, timeout: float = 15.0) -> WsSeen:
        """The session that asked for `key`, once it has ended."""
        deadline = time.monotonic() + timeout
        while key not in self.sessions and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = self.sessions.get(key)
        assert seen is not None, f"no WebSocket session for {key!r} reached the fake provider"
        seen.ended.wait(max(0.0, deadline - time.monotonic()))
        return seen

    def seen(self, prefix: str) -> list[Seen]:
        """The requests for models that start with `prefix`."""
        return [r for r in list(self.requests) if (r.model or "").startswith(prefix)]

    def _first_time(self, model: str) -> bool:
        self._asked[model] = self._asked.get(model, 0) + 1
        return self._asked[model] == 1

    # --- HTTP ------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self.websocket(request)
        body = await request.read()
        path = request.path
        model = None
        if ":streamGenerateContent" in path:
            model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        elif body:
            with contextlib.suppress(ValueError):
                model = json.loads(body).get("model")
        kind = scenario(model)
        self.requests.append(
            Seen("http", path, model, {k.lower(): v for k, v in request.headers.items()}, body)
        )
        if kind in AGENT_SCENARIOS:
            return await self.agent_http(request, path, model or "", kind, body)
        if path.endswith("/chat/completions"):
            if kind == "hold":
                return await self.hold(request, sse(*HELD_CHAT_EVENTS))
            return await self.stream(request, corpus(CHAT_BODY), cut=kind == "cut")
        if path.endswith("/responses"):
            return await self.stream(request, corpus(RESPONSES_BODY), cut=kind == "cut")
        if path.endswith("/messages"):
            data = anthropic_overloaded() if kind == "overloaded" else corpus(MESSAGES_BODY)
            return await self.stream(request, data, cut=kind == "cut")
        if ":streamGenerateContent" in path:
            return await self.stream(request, corpus(GEMINI_BODY), cut=kind == "cut")
        if path.endswith("/interactions"):
            status = "failed" if kind == "failed" else "completed"
            return await self.stream(
                request, interaction_events(model or "", status), kind == "cut"
            )
        if path == ACCOUNTS_CHECK:
            return web.json_response(chatgpt_accounts(request.headers.get("chatgpt-account-id")))
        return web.json_response({"error": {"message": f"no such path {path}"}}, status=404)

    async def agent_http(
        self, request: web.Request, path: str, model: str, kind: str, body: bytes
    ) -> web.StreamResponse:
        """A coding agent's request (AGENT_SCENARIOS), for the API its path names."""
        api = agent.api_of(path)
        if api is None:
            return web.json_response({"error": {"message": f"no such path {path}"}}, status=404)
        first = self._first_time(model) if kind in ("ratelimit", "cutonce") else False
        if kind == "ratelimit" and first:
            family = {"anthropic": "anthropic", "gemini": "gemini"}.get(api, "openai")
            return web.json_response(
                agent.RATE_LIMITED[family], status=429, headers={"retry-after": "1"}
            )
        parsed: object = {}
        with contextlib.suppress(ValueError):
            parsed = json.loads(body) if body else {}
        call = agent.shell_call(parsed) if kind == "tool" else None
        if call is not None and agent.has_tool_result(parsed):
            call = None
        if api == "anthropic" and isinstance(parsed, dict) and not parsed.get("stream"):
            # Claude Code's retry of a failed stream asks without `stream`: a JSON answer
            if kind == "error":
                return web.json_response(agent.ANTHROPIC_OVERLOADED, status=529)
            return web.json_response(agent.anthropic_message(model))
        data = agent.http_body(api, model, kind, call)
        return await self.stream(request, data, cut=kind == "cutonce" and first)

    async def stream(self, request: web.Request, body: bytes, cut: bool) -> web.StreamResponse:
        """The body in small writes; `cut`: only its first half of events, then a close
        without the final chunk (the connection drops mid-stream)."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if cut:
            events = events_of(body)
            body = b"".join(events[: max(1, len(events) // 2)])
        for i in range(0, len(body), CHUNK):
            await response.write(body[i : i + CHUNK])
        if cut:
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write_eof()
        return response

    async def hold(self, request: web.Request, first: bytes) -> web.StreamResponse:
        """`first`, then nothing until the peer goes (or HOLD_SECONDS)."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(first)
        deadline = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < deadline:
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            await asyncio.sleep(0.05)
        return response

    # --- WebSocket -------------------------------------------------------------------------

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=None, max_msg_size=0)
        await ws.prepare(request)
        seen = WsSeen(request.path_qs)
        path = request.path
        script: WsScript
        if path.endswith("/realtime"):
            script = self.realtime
            self.sessions[request.query.get("model", "")] = seen
        elif path.endswith("/responses"):
            script = self.responses_ws
            seen.request = request
        elif "BidiGenerateContent" in path:
            script = self.gemini_live
        else:
            script = self.echo
            self.sessions[request.query.get("id", "")] = seen
        try:
            async with asyncio.timeout(HOLD_SECONDS):
                await script(ws, seen, request.query.get("model", ""))
        except (TimeoutError, ConnectionError):
            pass
        finally:
            if ws.close_code is None:
                await ws.close()
            seen.close_code = ws.close_code
            seen.ended.set()
        return ws

    async def receive_text(self, ws: web.WebSocketResponse, seen: WsSeen) -> str | None:
        """The next text (or binary, decoded) message; None once the peer closed."""
        msg = await ws.receive()
        if msg.type is WSMsgType.TEXT:
            seen.received.append(msg.data)
            return str(msg.data)
        if msg.type is WSMsgType.BINARY:
            seen.received.append(msg.data.decode())
            return str(msg.data.decode())
        return None

    async def realtime(self, ws: web.WebSocketResponse, seen: WsSeen, model: str) -> None:
        """OpenAI Realtime: `session.created`, then each `response.create` answered with a
        whole response (`hold`: the response starts and never ends)."""
        session = {"id": "sess_1", "object": "realtime.session", "type": "realtime", "model": model}
        await ws.send_json({"type": "session.created", "event_id": "e0", "session": session})
        while (text := await self.receive_text(ws, seen)) is not None:
            if json.loads(text).get("type") != "response.create":
                continue
            response = {
                "id": "resp_1",
                "object": "realtime.response",
                "status": "in_progress",
                "output": [],
            }
            await ws.send_json({"type": "response.created", "event_id": "e1", "response": response})
            for n, piece in enumerate(["Hel", "lo"]):
                delta = {
                    "type": "response.output_text.delta",
                    "event_id": f"d{n}",
                    "response_id": "resp_1",
                    "item_id": "it",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": piece,
                }
                await ws.send_json(delta)
                if scenario(model) == "hold":
                    break
            if scenario(model) == "hold":
                continue
            usage = {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}
            done = {**response, "status": "completed", "usage": usage}
            await ws.send_json({"type": "response.done", "event_id": "e9", "response": done})

    async def responses_ws(self, ws: web.WebSocketResponse, seen: WsSeen, _: str) -> None:
        """The Responses API's WebSocket mode: each `response.create` answered with
        `response.created`, a delta and `response.completed` (scenario `steer`: a response
        that waits for a `response.steer`)."""
        steering: dict[str, Any] = {}  # the steerable response's lane and model
        while (text := await self.receive_text(ws, seen)) is not None:
            event = json.loads(text)
            if event.get("type") == "response.steer":
                await self.responses_steered(ws, event, steering)
                continue
            if event.get("type") != "response.create":
                continue
            self.sessions[str(event.get("model"))] = seen
            model = str(event.get("model"))
            kind = scenario(model)
            if kind == "steer":
                steering.update(lane=event.get("stream_id"), model=event.get("model"))
                await self.responses_steerable(ws, event)
                continue
            if kind in AGENT_SCENARIOS:
                headers = (
                    {k.lower(): v for k, v in seen.request.headers.items()}
                    if seen.request is not None
                    else {}
                )
                self.requests.append(Seen("websocket", seen.path, model, headers, text.encode()))
                if not await self.agent_ws(ws, seen, model, kind, event, text):
                    return
                continue
            r = {
                "id": "resp_7",
                "object": "response",
                "created_at": 1,
                "status": "in_progress",
                "model": event.get("model"),
                "output": [],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            }
            await ws.send_json({"type": "response.created", "sequence_number": 0, "response": r})
            delta = {
                "type": "response.output_text.delta",
                "sequence_number": 1,
                "item_id": "m",
                "output_index": 0,
                "content_index": 0,
                "delta": "Hi!",
                "logprobs": [],
            }
            await ws.send_json(delta)
            usage = {
                "input_tokens": 3,
                "output_tokens": 1,
                "total_tokens": 4,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            }
            completed = {**r, "status": "completed", "usage": usage}
            await ws.send_json(
                {"type": "response.completed", "sequence_number": 2, "response": completed}
            )

    @staticmethod
    def ws_response(rid: str, status: str, model: Any, **more: Any) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "created_at": 1,
            "status": status,
            "model": model,
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            **more,
        }

    async def responses_steerable(self, ws: web.WebSocketResponse, event: dict[str, Any]) -> None:
        """A response on the create's lane (`stream_id`) that starts and waits for a steer
        (openai-python's beta `ResponseCreate.stream_id`: events echo it)."""
        lane = event.get("stream_id")
        r = self.ws_response("resp_s1", "in_progress", event.get("model"))
        await ws.send_json(
            {"type": "response.created", "sequence_number": 0, "response": r, "stream_id": lane}
        )
        await ws.send_json(self.ws_delta("Roses are", 1, lane))

    @staticmethod
    def ws_delta(text: str, seq: int, lane: Any) -> dict[str, Any]:
        return {
            "type": "response.output_text.delta",
            "sequence_number": seq,
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "delta": text,
            "logprobs": [],
            "stream_id": lane,
        }

    async def responses_steered(
        self, ws: web.WebSocketResponse, event: dict[str, Any], steering: dict[str, Any]
    ) -> None:
        """`response.steer` answered as openai-python's beta types describe: accepted, the
        response ended `incomplete` (reason `steered`), and the server's own successor."""
        lane, model = steering.get("lane"), steering.get("model")
        steer = {"id": "steer_1", "previous_response_id": event.get("previous_response_id")}
        frames = [
            {"type": "response.steer.accepted", "sequence_number": 2, "steer": steer},
            {
                "type": "response.incomplete",
                "sequence_number": 3,
                "response": self.ws_response(
                    "resp_s1", "incomplete", model, incomplete_details={"reason": "steered"}
                ),
            },
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": self.ws_response("resp_s2", "in_progress", model),
            },
            self.ws_delta("Les roses", 1, lane),
            {
                "type": "response.completed",
                "sequence_number": 2,
                "response": self.ws_response("resp_s2", "completed", model),
            },
        ]
        for frame in frames:
            await ws.send_json({**frame, "stream_id": lane})

    async def agent_ws(
        self,
        ws: web.WebSocketResponse,
        seen: WsSeen,
        model: str,
        kind: str,
        event: dict[str, object],
        text: str,
    ) -> bool:
        """A coding agent's `response.create` over the Responses WebSocket; False once the
        connection was cut (`cutonce`: half the events, then the TCP connection closed). A
        warm-up (`generate: false`, Codex's first message) gets an empty response."""
        if event.get("generate") is False:
            for e in agent.responses_empty(model):
                await ws.send_json(e)
            return True
        first = self._first_time(model) if kind == "cutonce" else False
        call = agent.shell_call(event) if kind == "tool" else None
        if call and agent.has_tool_result(event):
            call = None
        events = agent.responses_events(model, kind, call)
        if kind == "cutonce" and first:
            for e in events[: len(events) // 2]:
                await ws.send_json(e)
            if seen.request is not None and seen.request.transport is not None:
                seen.request.transport.close()
            return False
        for e in events:
            await ws.send_json(e)
        return True

    async def gemini_live(self, ws: web.WebSocketResponse, seen: WsSeen, _: str) -> None:
        """Gemini Live: `setup` -> `setupComplete`; each client turn answered with
        `serverContent` parts, `generationComplete`, then `turnComplete` with usage."""
        text = await self.receive_text(ws, seen)
        if text is None:
            return
        model = json.loads(text).get("setup", {}).get("model", "")
        self.sessions[str(model).removeprefix("models/")] = seen
        await ws.send_bytes(json.dumps({"setupComplete": {}}).encode())
        while await self.receive_text(ws, seen) is not None:
            for piece in ["Hi ", "there"]:
                content = {"serverContent": {"modelTurn": {"parts": [{"text": piece}]}}}
                await ws.send_bytes(json.dumps(content).encode())
            await ws.send_bytes(
                json.dumps({"serverContent": {"generationComplete": True}}).encode()
            )
            usage = {"promptTokenCount": 4, "responseTokenCount": 2, "totalTokenCount": 6}
            done = {"serverContent": {"turnComplete": True}, "usageMetadata": usage}
            await ws.send_bytes(json.dumps(done).encode())

    async def echo(self, ws: web.WebSocketResponse, seen: WsSeen, _: str) -> None:
        """A plain WebSocket peer: `hello`, each text echoed as `echo: ...`; `bye` makes it
        close with 4000 "done"."""
        await ws.send_str("hello")
        while (text := await self.receive_text(ws, seen)) is not None:
            if text == "bye":
                await ws.close(code=4000, message=b"done")
                return
            await ws.send_str("echo: " + text)
