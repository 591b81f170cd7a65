"""How a transfer's end is named where it happens.

The upstream leg names its own ends from parser facts (`UpstreamEnd`, `UpstreamFailed`); this
module covers the client's side: a failed write or drain to the client is the client leaving,
raised as `Ended(CLIENT_DISCONNECTED)` with the original exception chained.
"""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from sseproxy.core import EndReason

# An exception message can quote a whole malformed response; the error body stays readable.
MAX_CAUSE_CHARS = 300


class Ended(Exception):
    """The transfer ended for `reason`; raised from inside a mapped write or the relay."""

    def __init__(self, reason: EndReason, cause: str = "") -> None:
        super().__init__(f"{reason}: {cause}" if cause else str(reason))
        self.reason = reason
        self.cause = cause


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_CAUSE_CHARS else text[:MAX_CAUSE_CHARS] + "..."


class ClientWrites:
    """`with CLIENT_IO:` re-raises an OSError (a reset, a broken pipe, aiohttp's
    "Cannot write to closing transport", all ConnectionResetError or kin) as
    `Ended(CLIENT_DISCONNECTED)`, chained. Cancellation and our own bugs pass through."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if isinstance(exc, OSError):
            raise Ended(EndReason.CLIENT_DISCONNECTED, describe(exc)) from exc
        return False


CLIENT_IO = ClientWrites()
