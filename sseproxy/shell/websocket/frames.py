"""Where WebSocket frames end in a byte stream, read from their headers alone (RFC 6455
section 5.2), so that the upstream leg can hand websockets' parser one frame at a time: the
work for one socket read is then counted frame by frame, and a read of many tiny frames is
split across loop iterations. The frames themselves are still parsed and checked by
websockets; a header this reads wrong only changes where a feed ends."""

from __future__ import annotations


class FrameCursor:
    """The position in the stream: inside a frame's header, or inside its payload."""

    __slots__ = ("_header", "_left")

    def __init__(self) -> None:
        self._header = bytearray()  # the current frame's header bytes taken so far
        self._left = 0  # bytes of the current frame (header rest and payload) still to take

    def span(self, data: bytes | bytearray) -> int:
        """How many of `data`'s first bytes to take next so that at most one frame ends in
        them (all of `data` when no frame ends in it); at least 1 when `data` is not empty."""
        if not data:
            return 0
        if self._left:
            n = min(self._left, len(data))
            self._left -= n
            return n
        header = self._header
        head = bytes(header) + bytes(data[:14])  # a header has at most 14 bytes
        if len(head) >= 2:
            code = head[1] & 0x7F
            extended = 2 if code == 126 else 8 if code == 127 else 0
            size = 2 + extended + (4 if head[1] & 0x80 else 0)
            if len(head) >= size:
                length = int.from_bytes(head[2 : 2 + extended], "big") if extended else code
                total = size - len(header) + length  # what is left of this frame in `data`
                n = min(total, len(data))
                self._left = total - n
                header.clear()
                return n
        header += data  # a header cut by the read: the rest comes with the next one
        return len(data)
