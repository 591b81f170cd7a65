"""Log lines from files (plain or gzip-rotated) or stdin, one at a time, each bounded: a line
longer than the bound is skipped to its end and reported as too long, never held whole."""

from __future__ import annotations

import gzip
import sys
from collections.abc import Iterable, Iterator
from typing import BinaryIO

# Longer than any record the proxy writes (its text fields are bounded), short enough to hold.
MAX_LINE_BYTES = 1024 * 1024  # without the newline
STDIN = "-"


class TooLong:
    """A line beyond `MAX_LINE_BYTES`: counted as unparseable, its bytes dropped."""


TOO_LONG = TooLong()


def _open(name: str) -> BinaryIO:
    if name == STDIN:
        return sys.stdin.buffer
    handle = open(name, "rb")  # noqa: SIM115 (closed by `read_lines`)
    if handle.peek(2)[:2] == b"\x1f\x8b":  # a rotated, compressed log (logrotate's compress)
        handle.close()
        return gzip.open(name, "rb")  # type: ignore[return-value]
    return handle


def read_lines(names: Iterable[str], limit: int = MAX_LINE_BYTES) -> Iterator[bytes | TooLong]:
    """Each non-blank line of each file in turn (stdin when `names` is empty)."""
    for name in list(names) or [STDIN]:
        handle = _open(name)
        try:
            yield from _lines(handle, limit)
        finally:
            if name != STDIN:
                handle.close()


def _lines(handle: BinaryIO, limit: int) -> Iterator[bytes | TooLong]:
    while line := handle.readline(limit + 1):
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := handle.readline(limit + 1)) and not rest.endswith(b"\n"):
                pass  # drop the rest of the line, a bounded piece at a time
            yield TOO_LONG
        elif line.strip():
            yield line
