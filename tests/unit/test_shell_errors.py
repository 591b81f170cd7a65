"""The client's side of naming an end: a failed write is the client leaving."""

from __future__ import annotations

import asyncio
import errno

import aiohttp
import pytest

from sseproxy.core import EndReason
from sseproxy.shell.errors import CLIENT_IO, MAX_CAUSE_CHARS, Ended


@pytest.mark.parametrize(
    "exc",
    [
        aiohttp.ClientConnectionResetError("Cannot write to closing transport"),
        ConnectionResetError(errno.ECONNRESET, "reset by peer"),
        BrokenPipeError(errno.EPIPE, "broken pipe"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_failed_client_write_is_the_client_leaving(exc: OSError) -> None:
    with pytest.raises(Ended) as ended, CLIENT_IO:
        raise exc
    assert ended.value.reason is EndReason.CLIENT_DISCONNECTED
    assert ended.value.__cause__ is exc  # the detail stays chained


def test_a_long_message_is_cut_in_the_cause() -> None:
    with pytest.raises(Ended) as ended, CLIENT_IO:
        raise ConnectionResetError("x" * 1000)
    assert len(ended.value.cause) == MAX_CAUSE_CHARS + 3


def test_cancellation_and_our_own_bugs_are_not_the_client_leaving() -> None:
    with pytest.raises(asyncio.CancelledError), CLIENT_IO:
        raise asyncio.CancelledError
    with pytest.raises(KeyError), CLIENT_IO:
        raise KeyError("a bug of ours")
