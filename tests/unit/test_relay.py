"""The relay's bounds, against stand-ins for the client's side and the upstream leg: one more
byte than the per-client mark pauses the upstream, the global cap pauses only clients that
hold bytes, and a paused relay resumes once its client has taken them, in order."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sseproxy.core import Dialect, EndReason, StreamTap
from sseproxy.core.pacing import Pacing
from sseproxy.inspector.endpoints import StreamView
from sseproxy.shell.budget import HeldBytes
from sseproxy.shell.errors import Ended
from sseproxy.shell.relay import Identity, IdleWatch, Parts, Relay
from sseproxy.shell.state import Timings
from sseproxy.shell.upstream import UpstreamEnd

MARK = 1000


class Client:
    """The client's side: a write buffer it empties only when told to read."""

    direct = True
    started = True
    last_wait = 0.0

    def __init__(self) -> None:
        self.buffer = 0
        self.received = bytearray()
        self.reading = asyncio.Event()
        self.closed = False

    def held(self) -> int:
        return self.buffer

    def gone(self) -> bool:
        return self.closed

    def write_now(self, chunk: bytes) -> bool:
        if self.closed:
            return False
        self.received += chunk
        self.buffer += len(chunk)
        return True

    async def write(self, chunk: bytes) -> None:
        self.write_now(chunk)

    async def drain(self) -> None:
        await self.reading.wait()
        if self.closed:
            raise ConnectionResetError("the client left")
        self.buffer = 0

    def broken(self) -> None:
        pass


class Leg:
    """The upstream leg's controls, recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def abort(self, reason: EndReason = EndReason.CLIENT_DISCONNECTED, cause: str = "") -> None:
        self.calls.append(f"abort:{reason}")


def relay(budget: HeldBytes) -> tuple[Relay, Client, Leg]:
    client = Client()
    tap = StreamTap(Dialect.SSE)
    start = time.monotonic()
    view = StreamView("id", "POST", "/", time.time(), start, tap=tap)
    watch = IdleWatch(60, lambda: None)
    parts = Parts(tap, Timings(start), Pacing(start), view, client, watch, None, None)  # type: ignore[arg-type]
    r = Relay(parts, Identity(), mark=MARK, budget=budget, idle_timeout=60)
    leg = Leg()
    r.upstream = leg
    return r, client, leg


async def started(r: Relay) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(r.run())
    await asyncio.sleep(0)  # idle: chunks are written from on_body from now on
    return task


async def test_one_byte_over_the_mark_pauses_the_upstream() -> None:
    r, client, leg = relay(HeldBytes(1 << 30))
    task = await started(r)
    r.on_body(b"a" * MARK)
    assert leg.calls == [] and client.buffer == MARK  # at the mark: still reading
    r.on_body(b"b")
    assert leg.calls == ["pause"]
    r.on_body(b"c" * 10)  # a read already under way: held, not written
    assert client.received == b"a" * MARK + b"b"
    client.reading.set()  # the client reads again
    await asyncio.sleep(0.01)
    assert leg.calls == ["pause", "resume"]
    assert client.received == b"a" * MARK + b"b" + b"c" * 10  # every byte, in order
    r.on_end(UpstreamEnd(complete=True, reason=EndReason.UPSTREAM_CLOSED))
    assert (await task).complete


async def test_above_the_global_cap_only_clients_holding_bytes_pause() -> None:
    budget = HeldBytes(1500)
    slow, slow_client, slow_leg = relay(budget)
    fast, fast_client, fast_leg = relay(budget)
    tasks = [await started(slow), await started(fast)]
    slow.on_body(b"s" * 900)  # under its mark; the proxy holds 900
    fast.on_body(b"f" * 700)  # 1,600 held in all: over the cap, and this client holds bytes
    assert budget.total == 1600 and budget.peak == 1600
    assert fast_leg.calls == ["pause"] and slow_leg.calls == []
    slow.on_body(b"s")  # over the cap, holding bytes: the next chunk pauses it too
    assert slow_leg.calls == ["pause"]
    fast_client.buffer = 0  # the fast client took its bytes: it holds none, it goes on
    fast_client.reading.set()
    await asyncio.sleep(0.05)
    assert fast_leg.calls == ["pause", "resume"] and slow_leg.calls == ["pause"]
    assert budget.total == 901
    slow_client.closed = True  # the slow client leaves while paused
    slow_client.reading.set()
    for r in (slow, fast):
        r.on_end(UpstreamEnd(complete=True, reason=EndReason.UPSTREAM_CLOSED))
    slow_result, fast_result = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(slow_result, Ended) and slow_result.reason is EndReason.CLIENT_DISCONNECTED
    assert not isinstance(fast_result, BaseException) and fast_result.complete
    assert budget.total == 0  # released with its relay


async def test_a_client_gone_before_a_direct_write_aborts_the_upstream() -> None:
    r, client, leg = relay(HeldBytes(1 << 30))
    task = await started(r)
    r.on_body(b"data: 1\n\n")
    client.closed = True
    r.on_body(b"data: 2\n\n")
    assert leg.calls == ["abort:client_disconnected"]
    ended = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(ended[0], Ended) and ended[0].reason is EndReason.CLIENT_DISCONNECTED
    assert client.received == b"data: 1\n\n"


async def test_the_idle_timeout_does_not_run_while_the_client_holds_the_upstream() -> None:
    expired: list[float] = []
    watch = IdleWatch(0.05, lambda: expired.append(time.monotonic()))
    watch.paused = True  # the relay paused the upstream for a client that does not read
    await asyncio.sleep(0.15)
    assert expired == []
    watch.paused, watch.last = False, time.monotonic()  # reading again: a new period
    await asyncio.sleep(0.2)
    assert len(expired) == 1
    watch.stop()
