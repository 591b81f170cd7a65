"""The one table that turns transport exceptions into end reasons."""

from __future__ import annotations

import asyncio
import errno

import aiohttp
import pytest

from sseproxy.core import EndReason
from sseproxy.shell.errors import (
    CLIENT_IO,
    UPSTREAM_IO,
    ContentTimeout,
    Ended,
    IdleTimeout,
    UpstreamFramingError,
)


def reset_chain() -> BaseException:
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "reset by peer")
        except ConnectionResetError as inner:
            raise aiohttp.ClientPayloadError("payload not completed") from inner
    except aiohttp.ClientPayloadError as outer:
        return outer


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (IdleTimeout("silence"), EndReason.IDLE_TIMEOUT),
        (ContentTimeout("keep-alives only"), EndReason.CONTENT_TIMEOUT),
        (UpstreamFramingError("chunk too long"), EndReason.UPSTREAM_PROTOCOL_ERROR),
        (reset_chain(), EndReason.UPSTREAM_RESET),
        (
            aiohttp.ClientPayloadError("not completed: ConnectionResetError(104)"),
            EndReason.UPSTREAM_RESET,
        ),
        (aiohttp.ServerDisconnectedError(), EndReason.UPSTREAM_CLOSED),
        (
            aiohttp.ClientPayloadError("TransferEncodingError: not enough data"),
            EndReason.UPSTREAM_CLOSED,
        ),
        (TimeoutError(), EndReason.IDLE_TIMEOUT),  # no response header within the idle timeout
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_upstream_exceptions_map_to_one_reason(exc: BaseException, reason: EndReason) -> None:
    with pytest.raises(Ended) as ended, UPSTREAM_IO:
        raise exc
    assert ended.value.reason is reason
    assert ended.value.__cause__ is exc  # the detail stays chained


def test_a_failed_client_write_is_the_client_leaving() -> None:
    with pytest.raises(Ended) as ended, CLIENT_IO:
        raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
    assert ended.value.reason is EndReason.CLIENT_DISCONNECTED


def test_cancellation_and_our_own_bugs_are_not_transport_failures() -> None:
    with pytest.raises(asyncio.CancelledError), UPSTREAM_IO:
        raise asyncio.CancelledError
    with pytest.raises(KeyError), UPSTREAM_IO:
        raise KeyError("a bug of ours")
