"""Resumed and retried streams, judged from the events alone.

An SSE event id does not make a continuation lossless, and sending a request again is never a
resume. The tap records each event's cursor (its SSE `id`, its `sequence_number`) and a short
hash of its data (`EventRecorder`, bounded); the shell keeps those ledgers for a while after a
stream ends and, when a request resumes one, hands both ledgers here. `link_resume` says
whether the continuation followed the cursor, skipped events, repeated them or rewrote them.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from sseproxy.core.events import SSEEvent

# Events whose cursor and hash one stream keeps, by default; the oldest go first (a resume
# names a cursor near where the stream was cut, so the tail is what is compared). One event
# costs at most MAX_EVENT_COST bytes kept, whatever its id: 256 streams of 256 events are
# at most 28 MiB (ids of up to 8 ASCII characters, the usual counters: about 17 MiB).
DEFAULT_LEDGER_EVENTS = 256
# An SSE id is kept as itself up to this many code points (no larger than its digest, and what
# a record lists in `missing` or `first_event`); a longer one only as a digest, so an id of
# 64 KiB costs what one of 33 characters does.
MAX_KEPT_ID_CHARS = 32
# Bytes of a long id's digest: 128 bits, so two ids never share one by chance.
ID_DIGEST_BYTES = 16
ID_DIGEST_PREFIX = "blake2b:"  # a kept id is never longer than 32: no id is taken for a digest
# What one recorded event costs at most (sys.getsizeof, CPython 3.11, 64-bit): the tuple (72),
# its ordinal and sequence ints (32 each), its data digest (65) and its id key (a str of at
# most 32 code points, 4 bytes each: 184), and the ledger set's slot for that key (~32).
MAX_EVENT_COST = 420
# Missing cursors named in a `gap` link; beyond, only their count grows.
MAX_MISSING_LISTED = 32
# Bytes of the digest: 8 bytes tells rewritten data apart with certainty for this purpose.
DIGEST_BYTES = 8
SEARCHED_BYTES = 256
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d{1,18})')
# The cursor Gemini Interactions writes in each event's data (no SSE `id:`), which a resume
# names as `last_event_id`.
_EVENT_ID = re.compile(rb'"event_id"\s*:\s*"([^"\\]{1,256})"')


class LedgerEvent(NamedTuple):
    """One event as a ledger keeps it: its 1-based position among the stream's events, the
    `cursor_key` of its SSE id in force (None: none), its `sequence_number` (None: none), a
    hash of its data."""

    ordinal: int
    event_id: str | None
    sequence: int | None
    digest: str

    @property
    def priming(self) -> bool:
        """An event with empty data (MCP's priming event): a cursor, not content."""
        return self.digest == EMPTY_DIGEST


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


EMPTY_DIGEST = digest(b"")


def cursor_key(event_id: str) -> str:
    """What a ledger keeps of an SSE id, and what a `Last-Event-ID` is compared by: the id
    itself up to MAX_KEPT_ID_CHARS, else `blake2b:` and a 16-byte digest of it (in hex), so
    memory does not grow with the ids a peer sends. Two ids have the same key only if equal."""
    if len(event_id) <= MAX_KEPT_ID_CHARS:
        return event_id
    raw = event_id.encode("utf-8", "surrogatepass")  # a header's undecodable bytes, as escaped
    return ID_DIGEST_PREFIX + hashlib.blake2b(raw, digest_size=ID_DIGEST_BYTES).hexdigest()


def sequence_number(raw: bytes) -> re.Match[bytes] | None:
    """The top-level `sequence_number` of a Responses event: the API writes it right after
    `type`, older recordings last; only those ends are searched (a snapshot event can hold
    megabytes of output between them)."""
    if raw[:1] != b"{":
        return None
    return _SEQUENCE.search(raw, 0, SEARCHED_BYTES) or _SEQUENCE.search(
        raw, max(0, len(raw) - SEARCHED_BYTES)
    )


def data_event_id(raw: bytes) -> str | None:
    """The top-level `event_id` string of an event's data (Gemini Interactions), searched at
    the ends as `sequence_number` is; None when there is none."""
    if raw[:1] != b"{":
        return None
    found = _EVENT_ID.search(raw, 0, SEARCHED_BYTES) or _EVENT_ID.search(
        raw, max(0, len(raw) - SEARCHED_BYTES)
    )
    return found.group(1).decode("utf-8", "replace") if found else None


class EventRecorder:
    """The last `cap` events of one stream as `LedgerEvent`s (memory bounded by `cap`)."""

    __slots__ = ("_id", "_key", "cap", "events", "seen")

    def __init__(self, cap: int = DEFAULT_LEDGER_EVENTS) -> None:
        self.cap = cap
        self.events: deque[LedgerEvent] = deque(maxlen=cap)
        self.seen = 0
        # The last id and its key: the id in force is the same object event after event, so
        # a long one is hashed once, and its key shared, not copied per event.
        self._id = ""
        self._key: str | None = None

    def record(self, event: SSEEvent) -> None:
        self.seen += 1
        found = sequence_number(event.raw)
        event_id = event.id
        if event_id != self._id:
            self._id, self._key = event_id, cursor_key(event_id) if event_id else None
        key = self._key
        if key is None and (in_data := data_event_id(event.raw)) is not None:
            key = cursor_key(in_data)
        self.events.append(
            LedgerEvent(
                self.seen,
                key,
                int(found.group(1)) if found else None,
                digest(event.raw),
            )
        )


class ResumeVerdict(StrEnum):
    CONTINUOUS = "continuous"  # the first resumed event follows the cursor; nothing repeated
    GAP = "gap"  # events between the cursor and the first resumed one never reached the client
    DUPLICATE = "duplicate"  # events the client already had were sent again
    DIVERGENT = "divergent"  # the same cursor carried different data
    UNKNOWN_ORIGIN = "unknown_origin"  # no ledger holds the cursor: too old, elsewhere, restart


@dataclass(frozen=True, slots=True)
class Original:
    """What the proxy kept of the stream being resumed."""

    request_id: str
    events: tuple[LedgerEvent, ...]
    delivered: int  # whole events the client was sent (ordinals up to this one)
    retry_ms: int | None = None  # the stream's SSE `retry:`
    ended: float = 0.0  # when it ended, on the shell's clock (seconds)


@dataclass(frozen=True, slots=True)
class ResumeLink:
    of: str | None
    cursor: str
    verdict: ResumeVerdict
    first_event: str | None = None  # the first resumed event's cursor (None: an empty stream)
    replayed: int = 0  # resumed events the client already had
    missing: tuple[str, ...] = ()  # cursors never sent to the client (up to the listed cap)
    missing_count: int = 0
    # Events the proxy had written to the client after the cursor it resumed from: the client
    # lost them (or named the wrong cursor), not the upstream.
    delivered_after_cursor: int = 0
    diverged: tuple[str, ...] = ()  # cursors whose data differs from the original's
    anomalies: Counter[str] = field(default_factory=Counter)

    def fields(self) -> dict[str, object]:
        return {
            "of": self.of,
            "cursor": self.cursor,
            "verdict": self.verdict.value,
            "first_event": self.first_event,
            "replayed": self.replayed,
            "missing": list(self.missing),
            "missing_count": self.missing_count,
            "delivered_after_cursor": self.delivered_after_cursor,
            "diverged": list(self.diverged),
        }


Key = Callable[[LedgerEvent], str | None]


def by_event_id(event: LedgerEvent) -> str | None:
    return event.event_id


def by_sequence(event: LedgerEvent) -> str | None:
    return None if event.sequence is None else str(event.sequence)


def link_resume(
    original: Original | None,
    cursor: str,
    resumed: Sequence[LedgerEvent],
    key: Key = by_event_id,
    elapsed_ms: float | None = None,
) -> ResumeLink:
    """Judge a stream resumed after `cursor` (the last event the client says it has, as the
    ledgers key it: `cursor_key` of a `Last-Event-ID`) against the original's ledger.
    `elapsed_ms`: since the original ended, checked against its `retry:` (a reconnect sooner
    than the server asked is the `reconnect_before_retry` anomaly)."""
    anomalies: Counter[str] = Counter()
    if original is None:
        return ResumeLink(None, cursor, ResumeVerdict.UNKNOWN_ORIGIN, anomalies=anomalies)
    retry_ms = original.retry_ms
    if retry_ms is not None and elapsed_ms is not None and elapsed_ms < retry_ms:
        anomalies["reconnect_before_retry"] += 1
    events = original.events
    position: dict[str, int] = {}
    for i, event in enumerate(events):
        k = key(event)
        if k is not None:
            position[k] = i  # the last event with it: the id in force after it
    content = [event for event in resumed if not event.priming]
    first = key(content[0]) if content else None
    c = position.get(cursor)
    if c is None:
        return ResumeLink(
            original.request_id, cursor, ResumeVerdict.UNKNOWN_ORIGIN, first, anomalies=anomalies
        )
    replayed = 0
    diverged: list[str] = []
    for event in content:
        k = key(event)
        if k is None or k not in position:
            continue
        i = position[k]
        if events[i].digest != event.digest:
            diverged.append(k)
        if i <= c:
            replayed += 1
    missing, missing_count = _missing(events, key, c, first, position)
    delivered_after = max(0, original.delivered - events[c].ordinal)
    if diverged:
        verdict = ResumeVerdict.DIVERGENT
    elif replayed:
        verdict = ResumeVerdict.DUPLICATE
    elif missing_count:
        verdict = ResumeVerdict.GAP
    else:
        verdict = ResumeVerdict.CONTINUOUS
    return ResumeLink(
        original.request_id,
        cursor,
        verdict,
        first,
        replayed,
        tuple(missing[:MAX_MISSING_LISTED]),
        missing_count,
        delivered_after,
        tuple(diverged[:MAX_MISSING_LISTED]),
        anomalies,
    )


def _missing(
    events: Sequence[LedgerEvent], key: Key, c: int, first: str | None, position: dict[str, int]
) -> tuple[list[str], int]:
    """Cursors after `c` and before the first resumed event that the resume never sent (the
    first `MAX_MISSING_LISTED` of them), and how many there are."""
    cursor = key(events[c])
    if cursor is not None and first is not None and cursor.isdigit() and first.isdigit():
        # Numbered events (`sequence_number`): the numbers between are missing, also those
        # the proxy never saw itself (the original was cut before them).
        start, stop = int(cursor) + 1, int(first)
        listed = [str(n) for n in range(start, min(stop, start + MAX_MISSING_LISTED))]
        return listed, max(0, stop - start)
    stop = position.get(first, len(events)) if first is not None else len(events)
    out: list[str] = []
    seen: set[str] = set()
    for event in events[c + 1 : stop]:
        k = key(event)
        if k is not None and k not in seen and k != cursor:
            seen.add(k)
            out.append(k)
    return out[:MAX_MISSING_LISTED], len(out)


def shared_prefix_chars(first: str, second: str) -> int:
    """Code points two answers share from their start: what a user saw twice on a retry."""
    n = min(len(first), len(second))
    i = 0
    while i < n and first[i] == second[i]:
        i += 1
    return i
