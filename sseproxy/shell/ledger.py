"""The resume ledger: what the proxy keeps of each stream after it ends, to link the request
that resumes or re-sends it.

A resume names a cursor: OpenAI Responses `GET /responses/{id}?starting_after=N`, Gemini
Interactions `GET /interactions/{id}?last_event_id=X` (the `event_id` each event's data carries),
or SSE's `Last-Event-ID` (MCP adds `MCP-Session-Id`). It is judged against the original's events by
`core.resume.link_resume`. A `Last-Event-ID` is linked only to a stream of the same route and
the same target (the raw path and query as the client sent them, which with the route decide
what was forwarded), never by its cursor alone: counters like `100` repeat across streams.
The method is not compared: an MCP stream opened by POST is resumed by GET on its endpoint.
A request sent again (same route, within the ledger's time) after one that was
`interrupted`, `cancelled`, `failed` or an `http_error` is a retry: generated anew, never a
resume. "Again" is judged as agents retry (`linked_by`): the same method, target and bytes
(`same_body`); the same JSON once parsed, key order and spacing aside (`same_meaning`: Codex
serialises `client_metadata` from a hash map, in a new order each attempt); the same JSON
without `stream` after a streamed attempt (`without_stream`: Claude Code's fallback after a cut
or an `overloaded_error`); a WebSocket turn's `response.create` sent as an HTTP request to the
same target (`websocket_fallback`: Codex's). The original's record is never rewritten; the
newer record carries the link.

MCP from 2026-07-28 (a stateless request) has no resume: a `Last-Event-ID` links nothing, and a
client re-issues a lost request under a new JSON-RPC id, so its retry is recognised by the call
(`mcp_key`: route target, method, name and arguments), not by its bytes. A request answering an
`input_required` result (it carries `inputResponses`) is the next round trip of that call: its
record says which (`round_trip`), counted from the first.

Bounded three ways, all configurable: streams kept (oldest evicted first), seconds kept after
the end, events per stream (the tap's recorder keeps the last ones). What one stream costs
does not grow with what a peer sends: ids are kept as `core.resume.cursor_key`s (at most 40
characters), the target and the body as 12-byte digests (`_digest`). A body is digested only up
to MAX_HASHED_BODY_BYTES (larger: never linked as a retry); it is parsed for its meaning only up
to MAX_MEANING_BODY_BYTES (larger: linked only when byte-equal).

What a request costs the ledger does not grow with the streams kept: a retry is found through
an index, (kind of key, route, digest) -> the newest kept stream with it, at most four entries
per stream. Nor is a body digested when no link can come of it: while the route keeps no
stream a later request could link to (one cut or failed, or paused for input), a request that
ended well is kept without its body's keys (a newer stream's keys only ever hide older ones
from a lookup, and there are none to hide), so the common case (every answer complete) parses
and hashes nothing.
"""

from __future__ import annotations

import zlib
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any
from urllib.parse import parse_qs

import orjson

from sseproxy.core import State
from sseproxy.core.request import parse_body
from sseproxy.core.resume import (
    Key,
    LedgerEvent,
    Original,
    ResumeLink,
    by_event_id,
    by_sequence,
    cursor_key,
    link_resume,
    shared_prefix_chars,
)

# Code points of an answer kept to measure a retry's shared prefix (only with keep_content:
# otherwise the proxy keeps no text and `shared_prefix_chars` is null).
MAX_PREFIX_CHARS = 16 * 1024
# States after which a re-sent request is a retry: the first answer was cut, or failed.
RETRIED_STATES = frozenset({State.INTERRUPTED, State.CANCELLED, State.FAILED, State.HTTP_ERROR})
RESPONSES_SEGMENT = "/responses/"
# Gemini Interactions: `GET …/interactions/{id}?stream=true&last_event_id=…` resumes a stream.
INTERACTIONS_SEGMENT = "/interactions/"
# The finish reason of an MCP result that asks the client for input (a round trip follows).
INPUT_REQUIRED = "input_required"
# Request bodies hashed to recognise a retry; a larger one is never linked as one (hashing
# 32 MiB on the event loop would hold every stream for tens of milliseconds).
MAX_HASHED_BODY_BYTES = 4 * 1024 * 1024
# Request bodies parsed to compare by meaning: parsing and writing back a JSON body costs about
# 10 ms per MiB on the event loop (hashing alone, 3): a larger body is linked only when its
# bytes are the same.
MAX_MEANING_BODY_BYTES = 1024 * 1024
# Fields that say how an answer travels, not what is asked: a retry over another transport
# (or without streaming) differs in these only. `type` is a WebSocket message's
# (`response.create`).
TRANSPORT_FIELDS = frozenset({"stream", "stream_options", "type"})
# A client's turn id is a UUID (Codex); a longer value is no id of that kind.
MAX_TURN_ID_CHARS = 128


class LinkedBy(StrEnum):
    """How a retry was recognised (the record's `retry.linked_by`)."""

    SAME_BODY = "same_body"
    SAME_MEANING = "same_meaning"
    WITHOUT_STREAM = "without_stream"
    WEBSOCKET_FALLBACK = "websocket_fallback"
    SAME_TURN = "same_turn"


@dataclass(frozen=True, slots=True)
class BodyKeys:
    """A request's identities, to recognise it sent again. `exact`: method, target, bytes.
    `meaning`: method, target and the parsed JSON object (keys sorted, spacing aside).
    `asked`: the target and that object without its TRANSPORT_FIELDS (what is asked, however
    it travels). `streamed`: it asked for a stream (`"stream": true`, or a WebSocket turn).
    `turn`: the target and the turn id the client names in its body (Codex's
    `client_metadata.turn_id`), which stays the same when the client re-sends a turn in
    another shape: over HTTP after the WebSocket, the whole input instead of a continuation."""

    exact: str | None = None
    meaning: str | None = None
    asked: str | None = None
    streamed: bool = False
    websocket: bool = False
    turn: str | None = None


def _keyed_hash(parts: tuple[bytes, ...]) -> int:
    """Python's own hash of the parts (SipHash-1-3 under a secret drawn per process: a peer
    cannot aim at a value it never sees). A bytes object keeps its hash, so a body hashed for
    one key costs nothing for the next."""
    return hash(parts)


def _digest(*parts: bytes) -> str:
    """The parts' identity, in process only (never written out): 64 bits of keyed SipHash,
    confirmed by a CRC-32 of the parts and their lengths, so two keys that collide in one
    still differ in the other. For a 40 KB body about half of what BLAKE2 (its reference
    build, as CPython ships it) costs."""
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, zlib.crc32(len(part).to_bytes(8, "big"), crc))
    return f"{_keyed_hash(parts) & 0xFFFF_FFFF_FFFF_FFFF:016x}{crc:08x}"


def body_keys(
    method: str, path: str, body: bytes, websocket: bool = False, parsed: Any = ...
) -> BodyKeys:
    """`body`'s identities (none beyond MAX_HASHED_BODY_BYTES; only `exact` beyond
    MAX_MEANING_BODY_BYTES or when it is no JSON object). `websocket`: `body` is a turn's
    `response.create` message on the session's `path`. `parsed`: `body`'s JSON, when the
    caller has it already (one parse per message)."""
    exact = body_key(method, path, body)
    if exact is None or len(body) > MAX_MEANING_BODY_BYTES:
        return BodyKeys(exact, websocket=websocket)
    obj = parse_body(body) if parsed is ... else parsed
    if not isinstance(obj, dict):
        return BodyKeys(exact, websocket=websocket)
    rest = {k: v for k, v in obj.items() if k not in TRANSPORT_FIELDS}
    how = {k: v for k, v in obj.items() if k in TRANSPORT_FIELDS}
    try:
        asked = orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)
        travels = orjson.dumps(how, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # too deep to write back: bytes only
        return BodyKeys(exact, websocket=websocket)
    target = path.encode("utf-8", "surrogatepass")
    asked_key = _digest(target, asked)
    meaning = _digest(method.encode(), target, asked_key.encode(), travels)
    streamed = websocket or obj.get("stream") is True
    return BodyKeys(exact, meaning, asked_key, streamed, websocket, client_turn(target, obj))


def client_turn(target: bytes, obj: dict[str, Any]) -> str | None:
    """The turn the client says a request belongs to, digested with its target: Codex's
    `client_metadata.turn_id` (a UUID; longer than MAX_TURN_ID_CHARS is not taken)."""
    metadata = obj.get("client_metadata")
    turn = metadata.get("turn_id") if isinstance(metadata, dict) else None
    if not isinstance(turn, str) or not turn or len(turn) > MAX_TURN_ID_CHARS:
        return None
    return _digest(b"turn", target, turn.encode("utf-8", "surrogatepass"))


def linked_by(kept: BodyKeys, new: BodyKeys) -> LinkedBy | None:
    """How `new` repeats `kept`, if it does."""
    if kept.exact is not None and kept.exact == new.exact and kept.websocket == new.websocket:
        return LinkedBy.SAME_BODY
    if kept.meaning is not None and kept.meaning == new.meaning and kept.websocket == new.websocket:
        return LinkedBy.SAME_MEANING
    if kept.asked is not None and kept.asked == new.asked:
        if kept.websocket and not new.websocket:
            return LinkedBy.WEBSOCKET_FALLBACK
        if kept.streamed and not new.streamed and not new.websocket:
            return LinkedBy.WITHOUT_STREAM
    if kept.turn is not None and kept.turn == new.turn:
        # the same turn in another shape: Codex's fallback sends the whole conversation where
        # its WebSocket turn continued the previous response
        if kept.websocket and not new.websocket:
            return LinkedBy.WEBSOCKET_FALLBACK
        return LinkedBy.SAME_TURN
    return None


@dataclass(frozen=True, slots=True)
class LedgerLimits:
    """Streams kept, and for how long after their end (the events per stream are the tap's
    `ledger_events`)."""

    streams: int = 256
    seconds: float = 600.0


@dataclass(frozen=True, slots=True)
class Kept:
    """One ended stream as the ledger keeps it."""

    original: Original
    route: str | None
    state: State
    response_id: str | None
    session_id: str | None
    keys: BodyKeys  # to recognise it sent again
    text: str | None  # the answer's first MAX_PREFIX_CHARS code points, when content is kept
    event_ids: frozenset[str]  # the keys of the SSE ids its events carried (`cursor_key`)
    target: str = ""  # `target_key` of its route's request target, for a Last-Event-ID lookup
    finish_reason: str | None = None
    round_trip: int = 1  # which round trip of an MCP call it was (1: the first request)


@dataclass(frozen=True, slots=True)
class Ended:
    """What the ledger needs of a request once its record's verdict is known (record.py
    builds it from the request's facts and progress)."""

    request_id: str
    started: float  # when the request arrived, on the clock `link` is given
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    route: str | None
    session_id: str | None
    state: State
    response_id: str | None
    events: tuple[LedgerEvent, ...]
    delivered: int  # whole events the client was sent
    retry_ms: int | None
    text: str | None  # the answer, when content is kept
    websocket: bool = False  # a WebSocket turn (its `keys` taken from its `response.create`)
    keys: BodyKeys | None = None  # digested already (a turn's, when its message came)
    finish_reason: str | None = None
    mcp_stateless: bool = False  # an MCP 2026-07-28 request: no resume; retries by call
    mcp_call: str | None = None  # `RequestFacts.mcp_call`: the call without its id
    mcp_round_trip: bool = False  # it carries `inputResponses`


@dataclass(frozen=True, slots=True)
class Links:
    """What the newer record says about the stream it continues or repeats."""

    resume: ResumeLink | None = None
    retry: dict[str, Any] | None = None
    round_trip: dict[str, Any] | None = None

    @property
    def anomalies(self) -> Counter[str]:
        return self.resume.anomalies if self.resume is not None else Counter()


@dataclass(frozen=True, slots=True)
class Resumption:
    """A request that asks to continue a stream from a cursor."""

    cursor: str
    key: Key
    response_id: str | None = None  # Responses: the response being resumed


def resumption(method: str, path: str, headers: Mapping[str, str]) -> Resumption | None:
    """The cursor a request resumes from, if it is a resume."""
    path, _, query = path.partition("?")
    if method == "GET" and RESPONSES_SEGMENT in path:
        after = parse_qs(query).get("starting_after")
        response_id = path.rsplit("/", 1)[-1]
        if after and after[0].isdigit() and response_id:
            return Resumption(after[0], by_sequence, response_id)
    if method == "GET" and INTERACTIONS_SEGMENT in path:
        last = parse_qs(query).get("last_event_id")
        interaction_id = path.rsplit("/", 1)[-1]
        if last and last[0] and interaction_id:
            return Resumption(cursor_key(last[0]), by_event_id, interaction_id)
    last_id = headers.get("Last-Event-ID")
    if last_id:
        return Resumption(cursor_key(last_id), by_event_id)
    return None


def target_key(path: str) -> str:
    """The identity of a request target (path and query, as sent) in 12 bytes: a stream keeps
    this, not a target of up to 8 KiB."""
    return _digest(path.encode("utf-8", "surrogatepass"))


def body_key(method: str, path: str, body: bytes) -> str | None:
    """The identity of a request sent again: its method, target and body (None beyond
    MAX_HASHED_BODY_BYTES)."""
    if len(body) > MAX_HASHED_BODY_BYTES:
        return None
    return _digest(method.encode(), path.encode("utf-8", "surrogatepass"), body)


def mcp_key(path: str, call: str) -> str:
    """The identity of a stateless MCP call sent again: its target and the call without its
    JSON-RPC id (`mcp_request.call_key`), digested as `body_key` is."""
    return _digest(b"mcp", path.encode("utf-8", "surrogatepass"), call.encode())


class KeyKind(Enum):
    """The index's kinds of key: one per way `linked_by` compares two requests."""

    EXACT = 1
    MEANING = 2
    ASKED = 3
    TURN = 4


# (kind, route, digest, websocket): the exact and meaning keys link only over the same
# transport; an asked key links a WebSocket turn (True) or a streamed HTTP request (False)
# to one sent without a stream; a turn id links whatever its transport (always False).
IndexKey = tuple[KeyKind, str | None, str, bool]


def index_keys(route: str | None, keys: BodyKeys) -> Iterator[IndexKey]:
    """Where a kept stream with `keys` is found (at most four entries)."""
    ws = keys.websocket
    if keys.exact is not None:
        yield (KeyKind.EXACT, route, keys.exact, ws)
    if keys.meaning is not None:
        yield (KeyKind.MEANING, route, keys.meaning, ws)
    if keys.asked is not None and keys.streamed:  # only a streamed original is re-sent without
        yield (KeyKind.ASKED, route, keys.asked, ws)
    if keys.turn is not None:
        yield (KeyKind.TURN, route, keys.turn, False)


def lookup_keys(route: str | None, keys: BodyKeys) -> Iterator[IndexKey]:
    """Where the kept streams that `keys` repeats (by `linked_by`) are found."""
    ws = keys.websocket
    if keys.exact is not None:
        yield (KeyKind.EXACT, route, keys.exact, ws)
    if keys.meaning is not None:
        yield (KeyKind.MEANING, route, keys.meaning, ws)
    if keys.asked is not None and not ws:
        yield (KeyKind.ASKED, route, keys.asked, True)  # a WebSocket turn sent over HTTP
        if not keys.streamed:
            yield (KeyKind.ASKED, route, keys.asked, False)  # a streamed request sent without
    if keys.turn is not None:
        yield (KeyKind.TURN, route, keys.turn, False)


def linkable(kept: Kept) -> bool:
    """A later request can link to it: it was cut or failed (a retry), or paused for input
    (a round trip)."""
    return kept.state in RETRIED_STATES or kept.finish_reason == INPUT_REQUIRED


class Ledger:
    """The ended streams, oldest first, within `limits`, and an index of their body keys."""

    def __init__(self, limits: LedgerLimits, keep_text: bool = False) -> None:
        self.limits = limits
        self.keep_text = keep_text
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._order: dict[str, int] = {}  # request id -> when it was kept (larger: newer)
        self._kept_count = 0
        # each key -> the newest kept stream with it, with its order: a retry is found without
        # a walk over every kept stream
        self._index: dict[IndexKey, tuple[int, Kept]] = {}
        self._linkable: Counter[str | None] = Counter()  # per route: `linkable` streams kept

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def indexed(self) -> int:
        """Entries in the index (at most four per kept stream)."""
        return len(self._index)

    def expire(self, now: float) -> None:
        """Forget the streams that ended more than `limits.seconds` ago."""
        horizon = now - self.limits.seconds
        while self._kept:
            oldest = next(iter(self._kept.values()))
            if oldest.original.ended >= horizon:
                break
            self._forget(self._kept.popitem(last=False)[1])

    def keep(self, kept: Kept) -> None:
        if self.limits.streams <= 0:
            return
        rid = kept.original.request_id
        replaced = self._kept.pop(rid, None)
        if replaced is not None:  # kept again under its id: it answers for its new keys only
            self._forget(replaced)
            self._reindex(replaced)
        self._kept[rid] = kept
        self._kept_count += 1
        self._order[rid] = self._kept_count
        for key in index_keys(kept.route, kept.keys):
            self._index[key] = (self._kept_count, kept)
        if linkable(kept):
            self._linkable[kept.route] += 1
        while len(self._kept) > self.limits.streams:
            self._forget(self._kept.popitem(last=False)[1])

    def _forget(self, gone: Kept) -> None:
        """Drop a stream that left `_kept` from the index and the counts. An entry that names
        it is removed: the oldest leaves first, so no other kept stream has that key (a stream
        replaced under its id is handled by `_reindex`)."""
        self._order.pop(gone.original.request_id, None)
        for key in index_keys(gone.route, gone.keys):
            entry = self._index.get(key)
            if entry is not None and entry[1] is gone:
                del self._index[key]
        if linkable(gone):
            self._linkable[gone.route] -= 1
            if self._linkable[gone.route] <= 0:
                del self._linkable[gone.route]

    def _reindex(self, gone: Kept) -> None:
        """Point the keys `gone` had at the newest kept stream that still has them (rare: a
        request id kept twice; a walk over the kept streams)."""
        wanted = set(index_keys(gone.route, gone.keys)) - self._index.keys()
        for kept in reversed(self._kept.values()):
            if not wanted:
                return
            for key in index_keys(kept.route, kept.keys):
                if key in wanted:
                    wanted.discard(key)
                    self._index[key] = (self._order[kept.original.request_id], kept)

    def _found(self, keys: Iterator[IndexKey]) -> list[Kept]:
        """The kept streams found under any of `keys`, newest first (at most five)."""
        entries = {id(e[1]): e for e in map(self._index.get, keys) if e is not None}
        return [kept for _, kept in sorted(entries.values(), key=lambda e: -e[0])]

    def newest(self) -> list[Kept]:
        return list(reversed(self._kept.values()))

    def original_of(
        self, route: str | None, session: str | None, r: Resumption, target: str = ""
    ) -> Kept | None:
        """The newest stream of the same route (and session) that the resume continues: for
        Responses, of the streams of that response (the original and earlier resumes), the
        newest that holds the cursor, else the newest; for `Last-Event-ID`, the newest of the
        same `target` that holds the cursor."""
        if r.response_id is not None:
            same = [k for k in self.newest() if k.route == route and k.response_id == r.response_id]
            holding = (k for k in same if any(r.key(e) == r.cursor for e in k.original.events))
            return next(holding, same[0] if same else None)
        for kept in self.newest():
            if kept.route != route or kept.target != target:
                continue
            if session is not None and kept.session_id not in (None, session):
                continue
            if r.cursor in kept.event_ids:
                return kept
        return None

    def retried(self, route: str | None, keys: BodyKeys) -> tuple[Kept, LinkedBy] | None:
        """The newest kept stream of the same route that `keys` repeats, when it was cut or
        failed (a repeat of a completed one is a new question, not a retry)."""
        if keys.exact is None:
            return None
        for kept in self._found(lookup_keys(route, keys)):
            how = linked_by(kept.keys, keys)  # by construction it links; checked all the same
            if how is not None:
                return (kept, how) if kept.state in RETRIED_STATES else None
        return None

    def paused(self, route: str | None, key: str | None) -> Kept | None:
        """The newest request of this MCP call, when it was answered `input_required`."""
        if key is None:
            return None
        found = self._found(iter([(KeyKind.EXACT, route, key, ws) for ws in (False, True)]))
        return found[0] if found and found[0].finish_reason == INPUT_REQUIRED else None

    def needs_keys(self, ended: Ended) -> bool:
        """Whether `ended`'s body keys can make or change a link, now or later: the route keeps
        a stream a request can link to, or `ended` is one (cut, failed, paused for input)."""
        return (
            self._linkable[ended.route] > 0
            or ended.state in RETRIED_STATES
            or ended.finish_reason == INPUT_REQUIRED
        )

    def link(self, ended: Ended, now: float) -> Links:
        """Link this ended request to the stream it resumes or repeats, then keep it."""
        if self.limits.streams <= 0:
            return Links()
        self.expire(now)
        text = ended.text[:MAX_PREFIX_CHARS] if self.keep_text and ended.text is not None else None
        stateless = ended.mcp_stateless
        if stateless and ended.mcp_call is not None:  # sent again under a new JSON-RPC id
            keys = BodyKeys(mcp_key(ended.path, ended.mcp_call))
        elif ended.keys is not None:
            keys = ended.keys
        elif not self.needs_keys(ended):  # no link can come of them: none computed
            keys = BodyKeys(websocket=ended.websocket)
        else:
            keys = body_keys(ended.method, ended.path, ended.body, ended.websocket)
        target = target_key(ended.path)
        links = Links()
        round_trip = 1
        asked = (
            None
            if stateless or ended.websocket
            else resumption(ended.method, ended.path, ended.headers)
        )
        paused = self.paused(ended.route, keys.exact) if ended.mcp_round_trip else None
        if paused is not None:
            round_trip = paused.round_trip + 1
            links = Links(round_trip={"of": paused.original.request_id, "number": round_trip})
        elif asked is not None:
            kept = self.original_of(ended.route, ended.session_id, asked, target)
            original = kept.original if kept is not None else None
            # From the original's end to this request's start: how long the client waited.
            elapsed = (ended.started - original.ended) * 1000 if original is not None else None
            links = Links(link_resume(original, asked.cursor, ended.events, asked.key, elapsed))
        else:
            found = self.retried(ended.route, keys)
            if found is not None:
                kept, how = found
                shared = None
                if text is not None and kept.text is not None:
                    shared = shared_prefix_chars(kept.text, text)
                retry = {"of": kept.original.request_id, "regenerated": True}
                links = Links(retry={**retry, "shared_prefix_chars": shared, "linked_by": how})
        original = Original(ended.request_id, ended.events, ended.delivered, ended.retry_ms, now)
        ids = frozenset(e.event_id for e in ended.events if e.event_id is not None)
        self.keep(
            Kept(
                original,
                ended.route,
                ended.state,
                ended.response_id,
                ended.session_id,
                keys,
                text,
                ids,
                target,
                ended.finish_reason,
                round_trip,
            )
        )
        return links
