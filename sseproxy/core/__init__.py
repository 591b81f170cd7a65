"""The pure core: bytes in, events and a verdict out. No I/O, no clock, no logging."""

from sseproxy.core.events import Comment, Line, SSEEvent
from sseproxy.core.framing import LineDecoder, SSEDecoder
from sseproxy.core.tap import ItemKind, StreamTap, TapItem, TapObserver, TapOptions
from sseproxy.core.verdict import (
    Dialect,
    EndReason,
    ErrorInfo,
    FinishCategory,
    Interruption,
    State,
    ToolCallSummary,
    Usage,
    Verdict,
    with_transport,
)

__all__ = [
    "Comment",
    "Dialect",
    "EndReason",
    "ErrorInfo",
    "FinishCategory",
    "Interruption",
    "ItemKind",
    "Line",
    "LineDecoder",
    "SSEDecoder",
    "SSEEvent",
    "State",
    "StreamTap",
    "TapItem",
    "TapObserver",
    "TapOptions",
    "ToolCallSummary",
    "Usage",
    "Verdict",
    "with_transport",
]
