"""The one relay loop: chunk -> transformation -> write to the client -> tap -> timings.

The upstream calls `on_body` with each chunk as it arrives. While the client takes bytes, the
chunk is written and accounted for right there (`_emit`, the same work on every path). When
the client pushes back (it holds more than the per-client mark, or the proxy as a whole holds
more than its cap and this client holds any), the upstream is paused; the few chunks that
still arrive wait in a small pending list, and the relay's task (`run`) waits for the
client's drain, writes them, and resumes the upstream. The task also carries everything that
waits: a drill's pauses, stalls and cuts, the analysis in slices of a compressed body or of a
costly read (the tap analyses one slice per call: the bytes are written first,
the analysis follows between other streams' work), and every write when the accelerator is off.
Each read relayed takes a step of the proxy's `LoopTurns` (pacing.py): when hundreds of streams
have reads ready in the same loop iteration, the ones past its budget are written by their
tasks in later iterations, in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sseproxy.capture.store import Capture
from sseproxy.core import EndReason, StreamTap
from sseproxy.core.inject import Close as InjectClose
from sseproxy.core.inject import Injector
from sseproxy.core.inject import KeepAlive as InjectKeepAlive
from sseproxy.core.inject import Pause as InjectPause
from sseproxy.core.inject import Write as InjectWrite
from sseproxy.core.pacing import Pacing
from sseproxy.inspector.endpoints import StreamView
from sseproxy.shell.budget import HeldBytes
from sseproxy.shell.delivery import ClientDelivery, ContentWatch
from sseproxy.shell.errors import Ended
from sseproxy.shell.pacing import LoopTurns
from sseproxy.shell.state import Timings
from sseproxy.shell.turns import AnalysisTurns

# Slices of the tap's backlog analysed after each write before the relay looks for new
# chunks (a slice is at most 16 KiB, ~1 ms of real events, ~20 ms at worst; one loop turn
# between each): enough to keep up with any real stream's expansion.
SLICES_PER_WRITE = 8
# Compressed input left unanalysed beyond this pauses the upstream until it is analysed
# rather than held: a bomb's backlog is small, a real stream's never this big.
MAX_UNANALYSED_BYTES = 4 * 1024 * 1024
# The keepalive-stall drill sends keep-alives for at most this long (as `sseproxy mock` does).
MAX_KEEPALIVE_STALL_S = 3600
# How often a paused relay looks again while the proxy holds more than its cap: first after
# OVER_CAP_RECHECK_S, then twice as long each time up to OVER_CAP_RECHECK_MAX_S. Hundreds of
# stalled clients polling every 10 ms kept the loop busy with their wake-ups alone.
OVER_CAP_RECHECK_S = 0.01
OVER_CAP_RECHECK_MAX_S = 0.25


class Upstream(Protocol):
    """What the relay asks of the upstream leg that feeds it."""

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def abort(self, reason: EndReason = ..., cause: str = "") -> None: ...


class BodyEnd(Protocol):
    """The upstream leg's end of a body, as the relay reads it."""

    @property
    def complete(self) -> bool: ...
    @property
    def reason(self) -> EndReason: ...
    @property
    def cause(self) -> str: ...
    @property
    def bytes_after_end(self) -> int: ...


class Identity:
    """The relay's transformation when no drill is asked for: each chunk as it came."""

    done = False

    def feed(self, chunk: bytes) -> Sequence[Any]:
        return (chunk,)

    def finish(self) -> Sequence[Any]:
        return ()


class Drill:
    """The Injector as the relay's transformation: writes become bytes, other steps stay."""

    def __init__(self, injector: Injector) -> None:
        self.injector = injector

    @property
    def done(self) -> bool:
        return self.injector.done

    def feed(self, chunk: bytes) -> Sequence[Any]:
        return [s.data if isinstance(s, InjectWrite) else s for s in self.injector.feed(chunk)]

    def finish(self) -> Sequence[Any]:
        return [s.data if isinstance(s, InjectWrite) else s for s in self.injector.finish()]


class IdleWatch:
    """Calls `on_expiry` after `timeout` seconds without an upstream byte.

    The relay only stores the time of each chunk in `last` (as it arrives, then as it is
    written: the record's gaps are measured from the write); one timer per idle period checks
    it. (A timer re-armed per chunk costs more than all of the analysis.) While the relay has
    paused the upstream for its client (`paused`), the upstream's silence is the client's
    doing: the period starts again when reading resumes.
    """

    def __init__(self, timeout: float | None, on_expiry: Callable[[], None]) -> None:
        """`timeout` None: never expires (a stream meant to stay open, MCP's listen)."""
        self.timeout = timeout
        self.on_expiry = on_expiry
        self.last = time.monotonic()
        self.paused = False
        self._loop = asyncio.get_running_loop()
        self._handle = None if timeout is None else self._loop.call_later(timeout, self._check)

    def _check(self) -> None:
        assert self.timeout is not None  # scheduled only with a timeout
        if self.paused:
            self._handle = self._loop.call_later(self.timeout, self._check)
            return
        deadline = self.last + self.timeout
        if time.monotonic() >= deadline:
            self.on_expiry()
        else:
            self._handle = self._loop.call_later(deadline - time.monotonic(), self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


class Parts:
    """What the relay reads and writes besides the upstream: one request's bookkeeping."""

    __slots__ = ("capture", "delivery", "pacing", "stalls", "tap", "timings", "view", "watch")

    def __init__(
        self,
        tap: StreamTap,
        timings: Timings,
        pacing: Pacing,
        view: StreamView,
        delivery: ClientDelivery,
        watch: IdleWatch,
        stalls: ContentWatch | None,
        capture: Capture | None,
    ) -> None:
        self.tap, self.timings, self.pacing, self.view = tap, timings, pacing, view
        self.delivery, self.watch, self.stalls, self.capture = delivery, watch, stalls, capture


class Relay:
    """Relays one response body; the upstream leg's `BodyReceiver`."""

    __slots__ = (
        "_counted",
        "_direct",
        "_end",
        "_failure",
        "_paused",
        "_pending",
        "_pending_bytes",
        "_timeline",
        "_wake",
        "budget",
        "idle_timeout",
        "mark",
        "parts",
        "steps",
        "transform",
        "turns",
        "upstream",
    )

    def __init__(
        self,
        parts: Parts,
        transform: Identity | Drill,
        *,
        mark: int,
        budget: HeldBytes,
        idle_timeout: float,
        turns: AnalysisTurns | None = None,
        steps: LoopTurns | None = None,
    ) -> None:
        self.parts = parts
        self.turns = turns if turns is not None else AnalysisTurns()
        self.steps = steps if steps is not None else LoopTurns()
        self.transform = transform
        self.mark = mark
        self.budget = budget
        self.idle_timeout = idle_timeout
        self.upstream: Upstream | None = None
        self._timeline = parts.view.timeline
        self._pending: list[tuple[bytes, float]] = []
        self._pending_bytes = 0
        self._counted = 0  # this relay's share of budget.total
        self._direct = False  # on_body writes and accounts itself
        self._paused = False
        self._end: BodyEnd | None = None
        self._failure: BaseException | None = None
        self._wake: asyncio.Future[None] | None = None

    @property
    def paused(self) -> bool:
        """Whether the relay has paused its upstream (it resumes it itself)."""
        return self._paused

    # -- the upstream's callbacks (synchronous, in order) --------------------------------

    def on_body(self, chunk: bytes) -> None:
        if not chunk or self._end is not None:
            return
        parts = self.parts
        arrived = parts.watch.last = time.monotonic()
        parts.pacing.first_byte(arrived)
        if parts.capture is not None:
            parts.capture.chunk(chunk, arrived)
        if self._direct and self.steps.free():
            try:
                if not self._write_now(chunk, arrived, arrived):
                    self._client_gone()
                elif self._pressed():
                    self._direct = False
                    self._pause()
                    self._notify()
                elif parts.tap.backlog:  # a costly read: the task analyses it in slices
                    self._direct = False
                    self._notify()
            except Exception as exc:  # a bug of ours: the task raises it, nothing else breaks
                self._fail(exc)
            return
        self._pending.append((chunk, arrived))
        self._pending_bytes += len(chunk)
        if self._pressed():
            self._pause()
        self._notify()

    def on_end(self, end: BodyEnd) -> None:
        if self._end is None:
            self._end = end
            self._direct = False
            self._notify()

    # -- the task -------------------------------------------------------------------------

    async def run(self) -> BodyEnd:
        """Relay until the upstream's end, once every byte before it was written; raises
        `Ended` for a drill's cut or a client that left, and a bug of ours as it is."""
        loop = asyncio.get_running_loop()
        transform, delivery = self.transform, self.parts.delivery
        direct_ok = delivery.direct and type(transform) is Identity
        try:
            while True:
                if self._failure is not None:
                    raise self._failure
                if self._pending:
                    await self._write_pending()
                    if transform.done:
                        return self._drill_end()
                    continue
                if self._end is not None:
                    await self._write_all(transform.finish(), time.monotonic())
                    return self._end
                if self._paused:
                    await self._relieve()
                    continue
                if self.parts.tap.backlog:
                    await self._analyse()
                    continue
                # Idle: the next chunks are written from on_body when nothing stands between.
                self._direct = direct_ok and delivery.started and not self.parts.tap.backlog
                self._wake = loop.create_future()
                try:
                    await self._wake
                finally:
                    self._wake = None
                    self._direct = False
        finally:
            self._direct = False
            self.budget.change(-self._counted)
            self._counted = 0

    async def _write_pending(self) -> None:
        """Each pending chunk through the transformation, written in order."""
        batch, self._pending = self._pending, []
        for n, (chunk, arrived) in enumerate(batch):
            # One read relayed per step: a burst spreads over loop iterations. Until then the
            # chunk counts against the client's mark and the proxy's cap, as pending.
            await self.steps.wait()
            self._pending_bytes -= len(chunk)
            await self._write_all(self.transform.feed(chunk), arrived)
            if self.transform.done:
                self._pending_bytes -= sum(len(rest) for rest, _ in batch[n + 1 :])
                return
        if self.parts.tap.backlog:
            await self._analyse()

    async def _write_all(self, outs: Sequence[Any], arrived: float) -> None:
        for out in outs:
            if type(out) is bytes:
                arrived = await self._emit(out, arrived)  # a drill's next write follows it
            elif type(out) is InjectKeepAlive:
                await self._keep_alive(out)
            else:
                await self._perform(out)

    def _write_now(self, out: bytes, arrived: float, now: float) -> bool:
        """The work for one chunk on every path that writes at once: write it, feed the tap,
        account for it. False when the client's connection is gone (nothing was written)."""
        parts = self.parts
        written = parts.delivery.write_now(out)
        # Fed and counted even when not written: these bytes did arrive.
        self._account(arrived, now, len(out), parts.tap.feed(out))
        parts.watch.last = now
        return written

    async def _emit(self, out: bytes, arrived: float) -> float:
        """Write one piece to the client from the task, then account for it; returns when it
        was written."""
        parts = self.parts
        delivery = parts.delivery
        try:
            if delivery.direct and delivery.started:
                now = time.monotonic()
                if not self._write_now(out, arrived, now):
                    raise Ended(EndReason.CLIENT_DISCONNECTED, "the client's connection closed")
                if delivery.held() > self.mark:
                    await self._analyse_while_held(self.mark)
                    await delivery.drain()
                    now = time.monotonic()
                    parts.timings.resumed(now)
            else:
                try:
                    await delivery.write(out)
                finally:  # counted even when the write failed: these bytes did arrive
                    try:
                        # A write that waited for its client may end with hundreds of others
                        # (clients that left together): the analysis takes a step of its own.
                        await self.steps.wait()
                    finally:
                        now = parts.watch.last = time.monotonic()
                        self._account(arrived, now, len(out), parts.tap.feed(out))
        except OSError as exc:
            raise Ended(EndReason.CLIENT_DISCONNECTED, f"{type(exc).__name__}: {exc}") from exc
        if delivery.last_wait:  # the client was not reading: shown beside upstream chunks
            parts.view.client_wait(now - delivery.last_wait, now)
        return now

    async def _analyse(self) -> None:
        """A backlog (a compressed body, a costly read) is analysed in slices taken
        through the proxy's AnalysisTurns, other streams running between them; a few per batch
        written keep the analysis close behind the bytes. Chunks that arrive, or the body's
        end, stop it: the rest waits until the client's response has ended
        (`analyse_backlog`), so analysis never delays a byte or the end. Only input left
        unanalysed beyond MAX_UNANALYSED_BYTES pauses the upstream until it is analysed."""
        tap = self.parts.tap
        slices = 0
        while tap.backlog:
            if tap.retained_bytes > MAX_UNANALYSED_BYTES:
                self._pause()
            elif slices >= SLICES_PER_WRITE or self._pending or self._end is not None:
                return
            slices += 1
            if deltas := await self.turns.pump(tap):
                now = time.monotonic()
                self._account(now, now, 0, deltas)

    async def _analyse_while_held(self, mark: int, slices: int | None = None) -> None:
        """The client is not reading: analyse the backlog meanwhile (at most `slices` slices,
        None: all), a slice at a time, until it is done or the client holds no more than
        `mark` (then the relay goes on at once), so that a stalled client's stream keeps no
        unanalysed read."""
        tap, delivery = self.parts.tap, self.parts.delivery
        while tap.backlog and delivery.held() >= mark and not delivery.gone():
            if slices is not None:
                if slices <= 0:
                    return
                slices -= 1
            if deltas := await self.turns.pump(tap):
                now = time.monotonic()
                self._account(now, now, 0, deltas)

    async def _relieve(self) -> None:
        """Paused: wait until the client has taken its bytes (and, while the proxy holds more
        than its cap, until this client holds none), then resume the upstream."""
        delivery = self.parts.delivery
        recheck = OVER_CAP_RECHECK_S
        try:
            while True:
                if delivery.gone():
                    raise Ended(EndReason.CLIENT_DISCONNECTED, "the client's connection closed")
                if delivery.held() > self.mark // 4:
                    await self._analyse_while_held(self.mark // 4)
                    await delivery.drain()
                self._recount()
                if not self.budget.over() or self._counted == 0:
                    break
                if self.parts.tap.backlog:  # the wait is the analysis' time
                    await self._analyse_while_held(0, slices=1)
                    continue
                await asyncio.sleep(recheck)
                recheck = min(recheck * 2, OVER_CAP_RECHECK_MAX_S)
        except OSError as exc:
            raise Ended(EndReason.CLIENT_DISCONNECTED, f"{type(exc).__name__}: {exc}") from exc
        now = time.monotonic()
        if delivery.last_wait:
            self.parts.view.client_wait(now - delivery.last_wait, now)
        self.parts.timings.resumed(now)
        self.parts.watch.paused, self.parts.watch.last = False, now
        self._paused = False
        if self.upstream is not None and self._end is None:
            self.upstream.resume_reading()

    # -- drill steps ----------------------------------------------------------------------

    async def _keep_alive(self, step: InjectKeepAlive) -> None:
        """The `keepalive-stall` drill: only keep-alives from now on, as a pinging server whose
        generator hangs sends them. Ends at `--content-timeout` (cut mode) or the bound."""
        self._stop_upstream("drill: keep-alives only")  # content never resumes
        stalls = self.parts.stalls
        deadline = time.monotonic() + MAX_KEEPALIVE_STALL_S
        while time.monotonic() < deadline:
            await asyncio.sleep(step.interval_ms / 1000)
            if stalls is not None and stalls.expired:
                raise Ended(EndReason.CONTENT_TIMEOUT, "drill: keep-alives only, no content")
            await self.steps.wait()
            self.parts.watch.last = await self._emit(step.data, time.monotonic())
        raise Ended(EndReason.IDLE_TIMEOUT, "drill: the keep-alive stall reached its bound")

    async def _perform(self, step: Any) -> None:
        """A drill step other than a write."""
        if isinstance(step, InjectPause):
            await asyncio.sleep(step.milliseconds / 1000)
        elif isinstance(step, InjectClose):
            raise Ended(EndReason.UPSTREAM_CLOSED, "drill: cut")
        else:  # a stall: the client sees silence until the idle timeout
            self._stop_upstream("drill: stall")
            await asyncio.sleep(self.idle_timeout)
            raise Ended(EndReason.IDLE_TIMEOUT, "drill: stall")

    def _drill_end(self) -> BodyEnd:
        """The drill has written its last byte: the client's response ends cleanly."""
        self._stop_upstream("drill: done")
        return DrillEnd()

    def _stop_upstream(self, cause: str) -> None:
        """Stop generation (and billing) now; the upstream's own end no longer matters."""
        if self._end is None:
            self._end = DrillEnd()
        if self.upstream is not None:
            self.upstream.abort(EndReason.UPSTREAM_CLOSED, cause)

    # -- bookkeeping ----------------------------------------------------------------------

    def _account(self, arrived: float, now: float, size: int, deltas: int) -> None:
        parts = self.parts
        parts.timings.chunk(arrived, now, deltas, parts.tap.events)
        parts.pacing.content(arrived, deltas)
        if parts.stalls is not None:
            parts.stalls.chunk(arrived, deltas)
        self._timeline.add(now, size, deltas)

    def _recount(self) -> None:
        held = self.parts.delivery.held() + self._pending_bytes
        self.budget.change(held - self._counted)
        self._counted = held

    def _pressed(self) -> bool:
        """The client holds more than its mark, or the proxy more than its cap and this
        client any: the upstream must wait."""
        self._recount()
        held = self._counted
        return held > self.mark or (held > 0 and self.budget.over())

    def _pause(self) -> None:
        if not self._paused:
            self._paused = self.parts.watch.paused = True
            if self.upstream is not None:
                self.upstream.pause_reading()

    def _notify(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _client_gone(self) -> None:
        """The client left while the relay wrote from on_body: stop the upstream at once."""
        self._direct = False
        self._fail(Ended(EndReason.CLIENT_DISCONNECTED, "the client's connection closed"))
        if self.upstream is not None:
            self.upstream.abort(EndReason.CLIENT_DISCONNECTED, "the client left")

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._direct = False
        self._notify()


class DrillEnd:
    """The end a drill gives a body it finished itself: clean, by the relay's decision."""

    complete = True
    reason = EndReason.UPSTREAM_CLOSED
    cause = "drill"
    bytes_after_end = 0


async def analyse_backlog(
    tap: StreamTap | None, stopping: Callable[[], bool], turns: AnalysisTurns
) -> None:
    """Analyse what the tap still holds, in slices taken through `turns`, before the verdict
    (the tap would otherwise do it in one go when closed, holding the loop for seconds). A
    client that leaves cancels its handler: the analysis goes on. Once the proxy is
    `stopping` (its response has ended: nothing is left to forward), or at a second
    cancellation, it stops: the tap analyses nothing more and its verdict says
    `analysis_cut_short`."""
    cancels = 0
    while tap is not None and tap.backlog:
        if stopping():
            tap.stop_analysis()
            return
        try:
            await turns.pump(tap)
        except asyncio.CancelledError:
            cancels += 1
            if cancels > 1 or stopping():
                tap.stop_analysis()
                return
