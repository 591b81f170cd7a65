"""permessage-deflate (RFC 7692) for the upstream leg, inflated a bounded amount at a time.

websockets negotiates the extension and compresses what the proxy sends, but its decoder
inflates a whole frame in one zlib call: a frame of about 130 KB can inflate to 128 MiB in
one go, holding the event loop for most of a second. Here the extension websockets applies
while parsing only takes the RSV1 bit off a compressed message's first frame and notes that
it was compressed; the upstream leg then inflates each compressed frame's payload itself with
`Inflater.step`, at most its turn's bytes per call, over as many loop turns as it takes.
websockets' documented extension API: `ClientPerMessageDeflateFactory.process_response_params`
returns the extension, `Extension.decode` is called on each frame read.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import deque
from collections.abc import Sequence

from websockets.extensions.base import Extension
from websockets.extensions.permessage_deflate import (
    ClientPerMessageDeflateFactory,
    PerMessageDeflate,
)
from websockets.frames import Frame, Opcode
from websockets.typing import ExtensionParameter

# The four bytes RFC 7692 takes off the end of each compressed message (section 7.2.2).
_TAIL = b"\x00\x00\xff\xff"
# Compressed bytes handed to zlib per call: what zlib keeps aside (`unconsumed_tail`, copied
# on each call) is at most this, whatever the frame's size.
IN_SLICE = 64 * 1024


class DeferredDeflate(PerMessageDeflate):
    """permessage-deflate as negotiated; incoming frames are left compressed for `Inflater`.

    `compressed` holds, for each text or binary frame parsed and not yet taken, whether its
    message is compressed (RSV1): the upstream leg takes one per such frame, in order."""

    def __init__(self, deflate: PerMessageDeflate) -> None:
        super().__init__(
            deflate.remote_no_context_takeover,
            deflate.local_no_context_takeover,
            deflate.remote_max_window_bits,
            deflate.local_max_window_bits,
            deflate.compress_settings,
        )
        self.compressed: deque[bool] = deque()
        self.inflater = Inflater(self.remote_max_window_bits, self.remote_no_context_takeover)

    def decode(self, frame: Frame, *, max_size: int | None = None) -> Frame:
        if frame.opcode is Opcode.TEXT or frame.opcode is Opcode.BINARY:
            self.compressed.append(frame.rsv1)
            if frame.rsv1:
                return dataclasses.replace(frame, rsv1=False)
        return frame  # a continuation with RSV1 set stays so: websockets refuses it


class DeferredDeflateFactory(ClientPerMessageDeflateFactory):
    """websockets' client offer and negotiation, with `DeferredDeflate` as the result."""

    def process_response_params(
        self, params: Sequence[ExtensionParameter], accepted_extensions: Sequence[Extension]
    ) -> PerMessageDeflate:
        return DeferredDeflate(super().process_response_params(params, accepted_extensions))


class Inflater:
    """Inflates one compressed frame's payload at a time, `step` by bounded `step`."""

    __slots__ = (
        "_carry", "_decoder", "_fin", "_fresh", "_input", "_pos", "_reset", "_tail", "_wbits",
        "busy",
    )  # fmt: skip

    def __init__(self, wbits: int, no_context_takeover: bool) -> None:
        self._wbits = wbits
        self._reset = no_context_takeover  # a new window for each message
        self._decoder = zlib.decompressobj(wbits=-wbits)
        self._fresh = True
        self._input: list[memoryview] = []  # what is left to inflate of the current frame
        self._pos = 0
        self._tail = b""  # what zlib kept aside at its last call (at most IN_SLICE bytes)
        self._carry = b""  # one byte inflated ahead (to learn whether anything was left)
        self._fin = False
        self.busy = False  # a frame's payload is being inflated

    def start(self, payload: bytes, first: bool, fin: bool) -> None:
        """A compressed frame's payload (`first`: its message's first frame)."""
        if first and self._reset and not self._fresh:
            self._decoder = zlib.decompressobj(wbits=-self._wbits)
        self._fresh = False
        self._input = [memoryview(payload)] if payload else []
        self._pos = 0
        self._tail = self._carry = b""
        self._fin = fin
        self.busy = True

    def step(self, limit: int) -> bytes:
        """Up to `limit` (> 0) bytes inflated; `busy` turns False once the frame is done.
        Raises zlib.error for data that is not deflate."""
        parts: list[bytes] = []
        room = limit
        if self._carry:
            parts.append(self._carry)
            room -= len(self._carry)
            self._carry = b""
        decoder = self._decoder
        while self.busy and room > 0:
            data = self._tail or self._next_slice()
            chunk = decoder.decompress(data, room)
            self._tail = decoder.unconsumed_tail
            if chunk:
                parts.append(chunk)
            if not data and len(chunk) < room:
                self._done()  # every byte given, and zlib had nothing more to give
            room -= len(chunk)
        if self.busy and not self._tail and not self._input:
            # every byte given and the room filled: one more byte tells whether zlib holds more
            self._carry = decoder.decompress(b"", 1)
            if not self._carry:
                self._done()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _done(self) -> None:
        self.busy = False
        if self._fin:
            # the end RFC 7692 took off: an empty stored block, which inflates to nothing
            self._decoder.decompress(_TAIL)

    def _next_slice(self) -> bytes | memoryview:
        while self._input:
            view = self._input[0]
            if self._pos < len(view):
                data = view[self._pos : self._pos + IN_SLICE]
                self._pos += len(data)
                if self._pos >= len(view):
                    self._input.pop(0)
                    self._pos = 0
                return data
            self._input.pop(0)
            self._pos = 0
        return b""  # everything was given: what zlib may still hold comes out now

    def drop(self) -> None:
        """Forget the frame being inflated (the session ended)."""
        self._input = []
        self._tail = self._carry = b""
        self.busy = False
