"""The shell's contact points with the core's tap: opening a tap for a response with what the
request asked for, and closing it with the transport's truth. Whoever watches the bytes (the
inspector's view, for its event list and raw view) registers a `TapObserver` on the tap: both
ways the shell relays a body feed the tap every chunk, so no relay needs to know about it."""

from __future__ import annotations

import functools

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions, Verdict
from sseproxy.core.request import RequestFacts


@functools.lru_cache(maxsize=16)
def tap_options(
    max_event_bytes: int, content_chars: int, ledger_events: int = 0, defer: bool = False
) -> TapOptions:
    """The settings' options, built once: they are the same for every response (frozen).
    `ledger_events`: events a resumable stream records for the resume ledger (0: none).
    `defer`: a costly read (`encoding.must_slice`) is analysed only by pumps (the relay's turns)."""
    return TapOptions(
        max_event_bytes=max_event_bytes,
        content_chars=content_chars,
        ledger_events=ledger_events,
        defer_large_reads=defer,
    )


def open_tap(
    dialect: Dialect | None,
    content_type: str | None,
    content_encoding: str | None,
    options: TapOptions,
    request: RequestFacts,
) -> StreamTap:
    return StreamTap(
        dialect,
        content_type=content_type,
        content_encoding=content_encoding,
        options=options,
        request=request,
    )


def close_tap(tap: StreamTap | None, end: EndReason | str, http_complete: bool | None) -> Verdict:
    """The verdict; `http_complete` is True only when the body ended by its own HTTP framing
    (last-chunk, exactly Content-Length, or the close of a close-delimited body), None when
    the client left before it did."""
    return (tap or StreamTap(Dialect.SSE)).close(end, http_complete=http_complete)
