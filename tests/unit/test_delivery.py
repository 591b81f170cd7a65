"""ClientDelivery and ContentWatch against stand-in transports and a hand-driven clock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sseproxy.config import ConfigError, load
from sseproxy.core import Dialect, EndReason, StreamTap
from sseproxy.shell import accelerator
from sseproxy.shell.delivery import MAX_WAIT_SPANS, ClientDelivery, ContentWatch, StallAction
from tests.streams import chat_chunk, sse


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


class Transport(asyncio.WriteTransport):
    """A client's transport: what was written, what it still buffers, whether it closed."""

    def __init__(self, buffered: int = 0) -> None:
        super().__init__()
        self.buffered = buffered
        self.limits: tuple[int | None, int | None] = (None, None)
        self.closing = False
        self.data = bytearray()

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.limits = (high, low)

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: Any) -> None:
        self.data += data


class Response:
    """Stands in for StreamResponse.write/drain: optionally takes `blocks` seconds, or fails."""

    def __init__(self, clock: Clock, chunked: bool = True) -> None:
        self.clock = clock
        self.chunked = chunked
        self.content_length: int | None = None
        self.blocks = 0.0
        self.fail = False
        self.written: list[bytes] = []
        self.drains = 0

    async def write(self, data: bytes) -> None:
        self.clock.now += self.blocks
        if self.fail:
            raise ConnectionResetError("client went away")
        self.written.append(data)

    async def drain(self) -> None:
        self.clock.now += self.blocks
        self.drains += 1


class Request:
    def __init__(self, transport: Transport | None, version: tuple[int, int] = (1, 1)) -> None:
        self.transport = transport
        self.version = version


@pytest.fixture
def accelerated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator.Detection, "enabled", True)


async def make(
    buffered: int = 0,
    tap: StreamTap | None = None,
    *,
    chunked: bool = True,
    version: tuple[int, int] = (1, 1),
    mark: int | None = None,
) -> tuple[ClientDelivery, Response, Clock, Transport]:
    transport = Transport(buffered)
    clock = Clock()
    response = Response(clock, chunked)
    request = Request(transport, version)
    delivery = ClientDelivery(request, response, tap, mark=mark, clock=clock)  # type: ignore[arg-type]
    return delivery, response, clock, transport


async def test_writes_are_timed_and_counted() -> None:
    delivery, response, _, _ = await make(buffered=1000)
    response.blocks = 0.25
    await delivery.write(b"data: 1\n\n")
    response.blocks = 0.5
    await delivery.write(b"data: 2\n\n")
    assert response.written == [b"data: 1\n\n", b"data: 2\n\n"]
    assert delivery.client_bytes == 18 and delivery.started
    assert delivery.fields(broken=False) == {"client_wait_ms": 750.0, "client_bytes": 18}
    assert delivery.last_wait == 0.5
    assert delivery.waits == [(1000.0, 0.25), (1000.25, 0.5)]


async def test_a_drain_is_a_wait_for_the_client() -> None:
    delivery, response, _, _ = await make()
    response.blocks = 2.0
    await delivery.drain()
    assert response.drains == 1 and delivery.client_wait_ms == 2000.0


async def test_the_mark_becomes_the_transports_high_water_mark_and_held_is_its_buffer() -> None:
    delivery, _, _, transport = await make(buffered=1234, mark=4096)
    assert transport.limits == (4096, None)
    assert delivery.held() == 1234


async def test_without_a_transport_nothing_is_held_and_nothing_is_written_directly() -> None:
    clock = Clock()
    response = Response(clock)
    response.blocks = 0.5
    delivery = ClientDelivery(Request(None), response, clock=clock)  # type: ignore[arg-type]
    assert (delivery.held(), delivery.gone(), delivery.direct) == (0, True, False)
    await delivery.write(b"a")
    assert delivery.client_wait_ms == 500.0


async def test_direct_writes_frame_each_chunk_as_rfc_9112_says(accelerated: None) -> None:
    delivery, _, clock, transport = await make()
    assert delivery.direct
    assert delivery.write_now(b"hello") and delivery.write_now(b"x" * 17)
    assert bytes(transport.data) == b"5\r\nhello\r\n11\r\n" + b"x" * 17 + b"\r\n"
    assert delivery.client_bytes == 22 and clock.reads == 0  # a direct write never waits


async def test_direct_writes_to_an_http10_client_are_the_bytes_as_they_are(
    accelerated: None,
) -> None:
    delivery, _, _, transport = await make(chunked=False, version=(1, 0))
    assert delivery.direct
    assert delivery.write_now(b"hello")
    assert bytes(transport.data) == b"hello"


async def test_a_response_with_a_length_is_never_written_directly(accelerated: None) -> None:
    clock = Clock()
    response = Response(clock, chunked=False)
    response.content_length = 10
    delivery = ClientDelivery(Request(Transport(), (1, 0)), response, clock=clock)  # type: ignore[arg-type]
    assert not delivery.direct


async def test_the_accelerator_off_means_no_direct_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator.Detection, "enabled", False)
    delivery, _, _, _ = await make()
    assert not delivery.direct


async def test_a_direct_write_to_a_closed_client_writes_nothing(accelerated: None) -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    delivery, _, _, transport = await make(tap=tap)
    delivery.write_now(EVENTS[0])
    tap.feed(EVENTS[0])
    transport.closing = True
    assert not delivery.write_now(EVENTS[1])
    assert bytes(transport.data).count(b"data:") == 1 and delivery.client_bytes == len(EVENTS[0])
    assert delivery.fields(broken=True)["events_delivered"] == 1


async def test_wait_spans_are_capped_but_the_total_keeps_growing() -> None:
    delivery, response, _, _ = await make()
    response.blocks = 0.001
    for _ in range(MAX_WAIT_SPANS + 1):
        await delivery.write(b"a")
    assert len(delivery.waits) == MAX_WAIT_SPANS
    assert delivery.client_wait_ms == pytest.approx((MAX_WAIT_SPANS + 1) * 1.0)


EVENTS = [
    sse(chat_chunk("one")),
    sse(chat_chunk("two")),
    sse(chat_chunk(finish="stop")),
    b"data: [DONE]\n\n",
]


async def relay(delivery: ClientDelivery, tap: StreamTap, chunks: list[bytes]) -> None:
    """The relay's order: write, then feed the tap even when the write failed."""
    for chunk in chunks:
        try:
            await delivery.write(chunk)
        finally:
            tap.feed(chunk)


async def test_a_failed_write_leaves_the_last_event_of_the_chunks_written_before() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    delivery, response, _, _ = await make(tap=tap)
    await relay(delivery, tap, [EVENTS[0] + EVENTS[1]])
    response.fail = True
    with pytest.raises(ConnectionResetError):
        await relay(delivery, tap, [EVENTS[2] + EVENTS[3][:5]])
    assert tap.events == 3  # the tap counted what arrived, the client did not get it
    fields = delivery.fields(broken=True)
    assert fields["events_delivered"] == 2
    assert fields["last_event_delivered"] == "chunk"
    assert fields["client_bytes"] == len(EVENTS[0] + EVENTS[1])


async def test_a_break_outside_a_write_reports_everything_written() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    delivery, _, _, _ = await make(tap=tap)
    await relay(delivery, tap, EVENTS)  # then the upstream reset, say
    assert delivery.fields(broken=True)["events_delivered"] == 4
    assert delivery.fields(broken=True)["last_event_delivered"] == "[DONE]"


async def test_a_partial_event_written_is_not_a_delivered_event() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    delivery, _, _, _ = await make(tap=tap)
    await relay(delivery, tap, [EVENTS[0], EVENTS[1][:10]])
    assert delivery.last_delivered() == (1, "chunk")


async def test_a_whole_delivery_reports_no_last_event() -> None:
    delivery, _, _, _ = await make(tap=StreamTap())
    assert "last_event_delivered" not in delivery.fields(broken=False)


# -- ContentWatch -------------------------------------------------------------------------------


async def watch(
    action: StallAction, timeout: float = 10.0
) -> tuple[ContentWatch, Clock, list[int]]:
    clock = Clock()
    cuts: list[int] = []
    w = ContentWatch(timeout, action, lambda: cuts.append(1), clock=clock)
    return w, clock, cuts


async def test_keep_alives_without_content_are_cut_at_the_timeout() -> None:
    w, clock, cuts = await watch(StallAction.CUT)
    w.chunk(clock.now, 1)  # content at 1000
    for _ in range(9):
        clock.now += 1.0
        w.chunk(clock.now, 0)  # keep-alives
    clock.now = 1009.5
    w._check()  # the timer fires early: nothing yet
    assert (cuts, w.expired) == ([], False)
    clock.now = 1010.0
    w._check()
    assert (cuts, w.expired, w.stalls) == ([1], True, 1)
    w.stop()


async def test_log_mode_counts_each_stalled_gap_once_and_never_cuts() -> None:
    w, clock, cuts = await watch(StallAction.LOG)
    w.chunk(clock.now, 0)  # first byte, no content: the reference
    clock.now += 5
    w.chunk(clock.now, 0)
    clock.now += 6
    w._check()
    w._check()  # the same gap again
    assert (w.stalls, cuts, w.expired) == (1, [], False)
    w.chunk(clock.now, 1)  # content resumes
    clock.now += 4
    w.chunk(clock.now, 0)
    clock.now += 7
    w._check()
    assert w.stalls == 2
    w.stop()


async def test_silence_without_bytes_is_not_a_content_stall() -> None:
    w, clock, cuts = await watch(StallAction.CUT)
    w.chunk(clock.now, 1)
    clock.now += 60  # no byte at all: the idle timeout's business
    w._check()
    assert (w.stalls, cuts) == (0, [])
    w.stop()


async def test_content_arriving_in_time_moves_the_deadline() -> None:
    w, clock, cuts = await watch(StallAction.CUT)
    for _ in range(30):
        clock.now += 1.0
        w.chunk(clock.now, 1 if int(clock.now) % 5 == 0 else 0)
        w._check()
    assert (w.stalls, cuts) == (0, [])
    w.stop()


async def test_the_watch_fires_on_its_own_timer() -> None:
    cut = asyncio.Event()
    w = ContentWatch(0.05, "cut", cut.set)
    w.chunk(time.monotonic(), 0)  # the first byte
    w.chunk(time.monotonic() + 0.01, 0)  # a later keep-alive, and then no content
    await asyncio.wait_for(cut.wait(), 5)
    assert w.expired
    assert w.stalls == 1


def test_content_timeout_settings_load_from_flags_and_environment() -> None:
    assert load(None, {}, {"upstream": "http://127.0.0.1:1"}).content_timeout is None
    env = {"SSEPROXY_CONTENT_TIMEOUT": "2.5", "SSEPROXY_CONTENT_STALL_ACTION": "cut"}
    s = load(None, env, {"upstream": "http://127.0.0.1:1"})
    assert (s.content_timeout, s.content_stall_action) == (2.5, "cut")
    s = load(None, env, {"upstream": "http://127.0.0.1:1", "content_timeout": 7.0})
    assert s.content_timeout == 7.0
    with pytest.raises(ConfigError) as err:
        load(None, {}, {"upstream": "http://x", "content_timeout": 0.0})
    assert "content_timeout" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load(None, {"SSEPROXY_CONTENT_STALL_ACTION": "drop"}, {"upstream": "http://x"})
    assert "content_stall_action" in str(err.value)


def test_content_timeout_is_an_interruption_reason() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    tap.feed(EVENTS[0])
    verdict = tap.close(EndReason.CONTENT_TIMEOUT)
    assert verdict.state == "interrupted"
    assert verdict.interruption is not None
    assert verdict.interruption.reason == "content_timeout"
