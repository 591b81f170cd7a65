"""The resume ledger: what the proxy keeps of each stream after it ends, to link the request
that resumes or re-sends it.

A resume names a cursor: OpenAI Responses `GET /responses/{id}?starting_after=N`, or SSE's
`Last-Event-ID` (MCP adds `MCP-Session-Id`). It is judged against the original's events by
`core.resume.link_resume`. A `Last-Event-ID` is linked only to a stream of the same route and
the same target (the raw path and query as the client sent them, which with the route decide
what was forwarded), never by its cursor alone: counters like `100` repeat across streams.
The method is not compared: an MCP stream opened by POST is resumed by GET on its endpoint.
A request sent again (same route, method, path and body, within the ledger's time) after one
that was `interrupted` or `cancelled` is a retry: generated anew, never a resume. The
original's record is never rewritten; the newer record carries the link.

Bounded three ways, all configurable: streams kept (oldest evicted first), seconds kept after
the end, events per stream (the tap's recorder keeps the last ones). What one stream costs
does not grow with what a peer sends: ids are kept as `core.resume.cursor_key`s (at most 40
characters), the target and the body as 16-byte digests.
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from sseproxy.core import State
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
# States after which a re-sent request is a retry: the first answer was cut.
RETRIED_STATES = frozenset({State.INTERRUPTED, State.CANCELLED})
RESPONSES_SEGMENT = "/responses/"
# Request bodies hashed to recognise a retry; a larger one is never linked as one (hashing
# 32 MiB on the event loop would hold every stream for tens of milliseconds).
MAX_HASHED_BODY_BYTES = 4 * 1024 * 1024


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
    body_key: str | None  # None: too large to be recognised again
    text: str | None  # the answer's first MAX_PREFIX_CHARS code points, when content is kept
    event_ids: frozenset[str]  # the keys of the SSE ids its events carried (`cursor_key`)
    target: str = ""  # `target_key` of its route's request target, for a Last-Event-ID lookup


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


@dataclass(frozen=True, slots=True)
class Links:
    """What the newer record says about the stream it continues or repeats."""

    resume: ResumeLink | None = None
    retry: dict[str, Any] | None = None

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
    last_id = headers.get("Last-Event-ID")
    if last_id:
        return Resumption(cursor_key(last_id), by_event_id)
    return None


def target_key(path: str) -> str:
    """The identity of a request target (path and query, as sent) in 16 bytes: a stream keeps
    this, not a target of up to 8 KiB."""
    return hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def body_key(method: str, path: str, body: bytes) -> str | None:
    """The identity of a request sent again: its method, target and body (None beyond
    MAX_HASHED_BODY_BYTES). Python's own keyed hash (SipHash, a secret per process): the key
    never leaves the process, and a 40 KB agent body hashes in a fifth of BLAKE2's time."""
    if len(body) > MAX_HASHED_BODY_BYTES:
        return None
    return f"{len(body):x}-{hash((method, path, body)) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


class Ledger:
    """The ended streams, oldest first, within `limits`."""

    def __init__(self, limits: LedgerLimits, keep_text: bool = False) -> None:
        self.limits = limits
        self.keep_text = keep_text
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        # (route, body_key) -> the newest kept stream with them: a retry is found without a
        # walk over every kept stream on every request.
        self._by_body: dict[tuple[str | None, str], Kept] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def expire(self, now: float) -> None:
        """Forget the streams that ended more than `limits.seconds` ago."""
        horizon = now - self.limits.seconds
        while self._kept:
            oldest = next(iter(self._kept.values()))
            if oldest.original.ended >= horizon:
                break
            self._unindex(self._kept.popitem(last=False)[1])

    def keep(self, kept: Kept) -> None:
        if self.limits.streams <= 0:
            return
        replaced = self._kept.get(kept.original.request_id)
        self._kept[kept.original.request_id] = kept
        self._kept.move_to_end(kept.original.request_id)
        if replaced is not None and replaced.body_key is not None:
            self._reindex((replaced.route, replaced.body_key))
        if kept.body_key is not None:
            self._by_body[(kept.route, kept.body_key)] = kept
        while len(self._kept) > self.limits.streams:
            self._unindex(self._kept.popitem(last=False)[1])

    def _unindex(self, gone: Kept) -> None:
        """Forget an evicted stream's index entry. The oldest goes first, so no other kept
        stream with its key remains once the entry names it."""
        if gone.body_key is not None:
            key = (gone.route, gone.body_key)
            if self._by_body.get(key) is gone:
                del self._by_body[key]

    def _reindex(self, key: tuple[str | None, str]) -> None:
        """Point `key` at the newest kept stream with it again (after a replaced one)."""
        self._by_body.pop(key, None)
        for kept in self.newest():
            if (kept.route, kept.body_key) == key:
                self._by_body[key] = kept
                return

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

    def retried(self, route: str | None, key: str | None) -> Kept | None:
        if key is None:
            return None
        kept = self._by_body.get((route, key))
        return kept if kept is not None and kept.state in RETRIED_STATES else None

    def link(self, ended: Ended, now: float) -> Links:
        """Link this ended request to the stream it resumes or repeats, then keep it."""
        if self.limits.streams <= 0:
            return Links()
        self.expire(now)
        text = ended.text[:MAX_PREFIX_CHARS] if self.keep_text and ended.text is not None else None
        key = body_key(ended.method, ended.path, ended.body)
        target = target_key(ended.path)
        links = Links()
        asked = resumption(ended.method, ended.path, ended.headers)
        if asked is not None:
            kept = self.original_of(ended.route, ended.session_id, asked, target)
            original = kept.original if kept is not None else None
            # From the original's end to this request's start: how long the client waited.
            elapsed = (ended.started - original.ended) * 1000 if original is not None else None
            links = Links(link_resume(original, asked.cursor, ended.events, asked.key, elapsed))
        else:
            kept = self.retried(ended.route, key)
            if kept is not None:
                shared = None
                if text is not None and kept.text is not None:
                    shared = shared_prefix_chars(kept.text, text)
                retry = {"of": kept.original.request_id, "regenerated": True}
                links = Links(retry={**retry, "shared_prefix_chars": shared})
        original = Original(ended.request_id, ended.events, ended.delivered, ended.retry_ms, now)
        ids = frozenset(e.event_id for e in ended.events if e.event_id is not None)
        self.keep(
            Kept(
                original,
                ended.route,
                ended.state,
                ended.response_id,
                ended.session_id,
                key,
                text,
                ids,
                target,
            )
        )
        return links
