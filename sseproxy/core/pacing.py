"""Pacing: when the content of one stream arrived, and what that says about the upstream.

Pure: the shell reads the clock and passes monotonic seconds in; memory is O(1) per stream
(running first/last/largest-gap figures, never a list of times), so a stream of any length
costs the same few floats.

Three findings come out of `Pacing.conclude()`:

- `output_tokens_per_s`: output tokens (from the provider's usage) over the time from the first
  to the last content delta. Never estimated: when it cannot be computed the summary says why
  (`no_usage`, `no_content`, `single_delta`, `single_write`).
- `upstream_buffered`: a relay or gateway between the provider and the proxy held the response
  and released it at once. See `BUFFERED_*` below for the rule and why those numbers.
- `content_stall`: a gap without content (between content deltas, from the first byte to the
  first content, or after the last content while keep-alives still arrived) reached the
  configured content timeout.

Content means any delta the dialect counts as content: text, reasoning / thinking, refusal.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from enum import StrEnum

# -- upstream buffering ------------------------------------------------------------------------
# A buffered stream shows nothing for a long time, then all of its content within
# milliseconds. All three conditions must hold:
#
# 1. At least BUFFERED_MIN_DELTAS content deltas. A short answer of one to three deltas can
#    legitimately arrive in one write (one TCP segment), so it says nothing about buffering.
BUFFERED_MIN_DELTAS = 4
# 2. The first content came at least BUFFERED_MIN_WAIT_S after the request started: the user
#    saw nothing for a noticeable time. Below a second a buffered stream is not the problem a
#    user reports, and a fast model's whole answer can arrive that soon.
BUFFERED_MIN_WAIT_S = 1.0
# 3. The content deltas arrived faster than any generation: on average at most
#    BUFFERED_MAX_INTERVAL_S apart, and the whole burst took at most BUFFERED_BURST_FRACTION of
#    the time up to the last content. Normally paced streams space deltas 10-100 ms apart, ten
#    times this interval or more, so they are never flagged however long they waited for their
#    first content (a reasoning model's late first content that then flows normally is exactly
#    this case: its burst is long and its interval normal). A released buffer arrives at link
#    speed: 500 deltas (about 100 KB) over a 1 MB/s link take 0.1 s, 0.2 ms per delta, inside
#    both limits after the minimum wait. The fraction alone would flag the reasoning model; the
#    interval alone would flag a very fast model (2,000 tokens/s) whose long answer streams for
#    seconds. Together they describe "nothing, then everything".
BUFFERED_MAX_INTERVAL_S = 0.001
BUFFERED_BURST_FRACTION = 0.1


class Unmeasured(StrEnum):
    """Why `output_tokens_per_s` is None."""

    NO_USAGE = "no_usage"  # the provider reported no output token count
    NO_CONTENT = "no_content"  # no content delta arrived
    SINGLE_DELTA = "single_delta"  # one content delta: no span to divide by
    SINGLE_WRITE = "single_write"  # all content deltas arrived at the same instant


UPSTREAM_BUFFERED = "upstream_buffered"
CONTENT_STALL = "content_stall"


@dataclass(frozen=True, slots=True)
class PacingSummary:
    """What the record carries; milliseconds rounded like the other timing fields."""

    time_to_first_content_ms: float | None
    content_burst_ms: float | None
    max_content_gap_ms: float | None
    output_tokens_per_s: float | None
    output_tokens_per_s_unmeasured: Unmeasured | None
    upstream_buffered: bool
    content_stall: bool

    @property
    def anomalies(self) -> tuple[str, ...]:
        """Anomaly names to count in the record (each at most once per stream)."""
        found = []
        if self.upstream_buffered:
            found.append(UPSTREAM_BUFFERED)
        if self.content_stall:
            found.append(CONTENT_STALL)
        return tuple(found)

    def fields(self) -> dict[str, float | str | None]:
        """The record fields (the anomalies go into the record's anomaly counts instead). Not
        `time_to_first_content_ms`: the record's `ttft_ms` is that, read from the same clock."""
        return {
            "content_burst_ms": self.content_burst_ms,
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_unmeasured": (
                None
                if self.output_tokens_per_s_unmeasured is None
                else str(self.output_tokens_per_s_unmeasured)
            ),
        }


# Upper bounds (seconds) of the time-per-output-chunk histogram: a fast model's chunks come a
# few milliseconds apart, a slow local model's or a tool-using turn's seconds apart.
CHUNK_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1,
    2.5,
    5,
    10,
)


class ChunkTimes:
    """The times between output chunks of one stream, counted into `CHUNK_BUCKETS` (the last
    count is beyond them): O(1) memory for any stream, merged into the
    `gen_ai.client.operation.time_per_output_chunk` histogram when the stream ends."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(CHUNK_BUCKETS) + 1)
        self.total = 0.0

    def add(self, seconds: float) -> None:
        if seconds >= 0:  # a monotonic clock; a negative span is no measurement
            self.counts[bisect_left(CHUNK_BUCKETS, seconds)] += 1
            self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class Pacing:
    """Running content timings of one stream. Feed `first_byte` once and `content` per batch.

    `content(now, count)` is called for each upstream chunk that completed `count` content
    deltas (what `StreamTap.feed` returns), so its cost is paid only by content chunks.
    """

    __slots__ = (
        "deltas",
        "first_byte_at",
        "first_content",
        "last_content",
        "max_gap",
        "start",
    )

    def __init__(self, start: float) -> None:
        self.start = start
        self.first_byte_at: float | None = None
        self.first_content: float | None = None
        self.last_content: float | None = None
        self.deltas = 0
        self.max_gap = 0.0  # largest gap between content batches, or first byte to first content

    def first_byte(self, now: float) -> None:
        """The first body byte arrived (later calls are ignored)."""
        if self.first_byte_at is None:
            self.first_byte_at = now

    def content(self, now: float, count: int) -> None:
        """A chunk that completed `count` content deltas arrived at `now`."""
        if count <= 0:
            return
        last = self.last_content
        if last is None:
            self.first_content = now
            last = self.first_byte_at if self.first_byte_at is not None else now
        if now - last > self.max_gap:
            self.max_gap = now - last
        self.last_content = now
        self.deltas += count

    def conclude(
        self,
        end: float,
        output_tokens: int | None,
        *,
        last_byte: float | None = None,
        content_timeout: float | None = None,
    ) -> PacingSummary:
        """Decide at `end`. `last_byte`: the time of the last upstream chunk (keep-alives
        included); silence after the last content counts as a content gap only when bytes
        still arrived after it, up to `end` (the content watch's cut, or the stream's end)."""
        first, last = self.first_content, self.last_content
        gap = self.max_gap
        reference = last if last is not None else self.first_byte_at
        if reference is not None and last_byte is not None and last_byte > reference:
            gap = max(gap, end - reference)
        ttfc = None if first is None else first - self.start
        burst = None if first is None or last is None else last - first
        rate, unmeasured = self._rate(output_tokens, burst)
        return PacingSummary(
            time_to_first_content_ms=_ms(ttfc),
            content_burst_ms=_ms(burst),
            max_content_gap_ms=_ms(gap) if reference is not None else None,
            output_tokens_per_s=rate,
            output_tokens_per_s_unmeasured=unmeasured,
            upstream_buffered=self._buffered(ttfc, burst),
            content_stall=(
                content_timeout is not None and reference is not None and gap >= content_timeout
            ),
        )

    def _rate(
        self, output_tokens: int | None, burst: float | None
    ) -> tuple[float | None, Unmeasured | None]:
        if burst is None:
            return None, Unmeasured.NO_CONTENT
        if output_tokens is None:
            return None, Unmeasured.NO_USAGE
        if self.deltas == 1:
            return None, Unmeasured.SINGLE_DELTA
        if burst <= 0:
            return None, Unmeasured.SINGLE_WRITE
        return round(output_tokens / burst, 3), None

    def _buffered(self, ttfc: float | None, burst: float | None) -> bool:
        if ttfc is None or burst is None or self.deltas < BUFFERED_MIN_DELTAS:
            return False
        if ttfc < BUFFERED_MIN_WAIT_S:
            return False
        interval = burst / (self.deltas - 1)
        return interval <= BUFFERED_MAX_INTERVAL_S and burst <= BUFFERED_BURST_FRACTION * (
            ttfc + burst
        )
