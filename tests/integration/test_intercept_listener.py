"""The intercept listener over real sockets, on asyncio's loop and uvloop: the CONNECT head's
bounds (size at the bound and one more, time), refusals, and a host that cannot be reached.
Each CONNECT that is not an intercepted exchange leaves one `connect.finished` line."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sseproxy.intercept.ca import Leaves, load_or_create
from sseproxy.intercept.connect import MAX_HEAD_BYTES
from sseproxy.intercept.listener import InterceptListener, ListenerSettings
from tests.integration.conftest import LogCapture
from tests.integration.intercept_sockets import (
    TIMEOUT,
    connect_lines,
    exchange,
    start_echo,
    wait_line,
)


class Answering(asyncio.Protocol):
    """Stands in for the aiohttp server: never reached by these tests' CONNECTs."""


@pytest.fixture(scope="module")
def leaves(tmp_path_factory: pytest.TempPathFactory) -> Leaves:
    return Leaves(load_or_create(tmp_path_factory.mktemp("ca")))


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    server = await start_echo()
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
async def listener(leaves: Leaves) -> AsyncIterator[tuple[InterceptListener, int]]:
    settings = ListenerSettings({"intercepted.test"}, connect_timeout=5, head_timeout=0.3)
    proxy = InterceptListener(settings, leaves, Answering)
    port = await proxy.start("127.0.0.1", 0)
    yield proxy, port
    await proxy.stop()


def head_of(size: int, authority: str) -> bytes:
    start = f"CONNECT {authority} HTTP/1.1\r\nX-Pad: ".encode()
    return start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"


async def test_a_head_at_the_bound_is_carried_out(
    listener: tuple[InterceptListener, int], echo: int, logs: LogCapture
) -> None:
    _, port = listener
    head = head_of(MAX_HEAD_BYTES, f"127.0.0.1:{echo}")
    assert len(head) == MAX_HEAD_BYTES
    async with asyncio.timeout(TIMEOUT):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head)
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
    line = await wait_line(logs)
    assert (line["mode"], line["outcome"], line["bytes_up"], line["bytes_down"]) == (
        "tunnel",
        "closed",
        4,
        4,
    )


async def test_a_head_one_byte_over_the_bound_is_refused(
    listener: tuple[InterceptListener, int], echo: int, logs: LogCapture
) -> None:
    _, port = listener
    answer = await exchange(port, head_of(MAX_HEAD_BYTES + 1, f"127.0.0.1:{echo}"))
    assert answer.startswith(b"HTTP/1.1 431 ")
    line = await wait_line(logs)
    assert (line["outcome"], line["host"]) == ("bad_connect", None)


async def test_a_head_that_does_not_arrive_in_time_is_answered_408(
    listener: tuple[InterceptListener, int], logs: LogCapture
) -> None:
    _, port = listener
    answer = await exchange(port, b"CONNECT intercepted.test:443 HTTP/1.1\r\n")
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert (await wait_line(logs))["outcome"] == "head_timeout"


async def test_an_unreachable_host_is_answered_502(
    listener: tuple[InterceptListener, int], logs: LogCapture
) -> None:
    _, port = listener
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]  # nothing listens there once closed
    answer = await exchange(port, f"CONNECT 127.0.0.1:{free} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 502 ")
    line = await wait_line(logs)
    assert (line["mode"], line["outcome"], line["port"]) == ("tunnel", "upstream_unreachable", free)


async def test_tls_bytes_sent_before_the_answer_are_refused_for_an_intercepted_host(
    listener: tuple[InterceptListener, int], logs: LogCapture
) -> None:
    _, port = listener
    early = b"CONNECT intercepted.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01\x00\x05hello"
    answer = await exchange(port, early)
    assert answer.startswith(b"HTTP/1.1 400 ")
    line = await wait_line(logs)
    assert (line["mode"], line["outcome"]) == ("intercept", "bad_connect")


async def test_the_bound_port_is_returned(tmp_path: Path, leaves: Leaves) -> None:
    proxy = InterceptListener(ListenerSettings(set(), 5), leaves, Answering)
    port = await proxy.start("127.0.0.1", 0)
    try:
        assert port > 0
    finally:
        await proxy.stop()


async def test_tunnels_up_to_the_bound_and_one_more_is_answered_503(
    leaves: Leaves, echo: int, logs: LogCapture
) -> None:
    settings = ListenerSettings(set(), connect_timeout=5, max_tunnels=2)
    proxy = InterceptListener(settings, leaves, Answering)
    port = await proxy.start("127.0.0.1", 0)
    head = f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode()
    opened = []
    try:
        async with asyncio.timeout(TIMEOUT):
            for _ in range(2):  # at the bound
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(head)
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
                opened.append(writer)
            answer = await exchange(port, head)  # one more
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert connect_lines(logs)[-1]["outcome"] == "overloaded"
            opened.pop().close()
            while len(proxy.tunnels) > 1:
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)  # a place is free again
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            opened.append(writer)
    finally:
        for writer in opened:
            writer.close()
        await proxy.stop()
