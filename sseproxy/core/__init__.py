"""The pure core: bytes in, events and a verdict out. No I/O, no clock, no logging."""

from .events import Comment, Line, SSEEvent
from .framing import LineDecoder, SSEDecoder
from .tap import StreamTap, TapOptions
from .verdict import (
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
    "Line",
    "LineDecoder",
    "SSEDecoder",
    "SSEEvent",
    "State",
    "StreamTap",
    "TapOptions",
    "ToolCallSummary",
    "Usage",
    "Verdict",
    "with_transport",
]
