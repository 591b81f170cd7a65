"""Content-Encoding for the analysis copy: the client gets the compressed bytes untouched.

Decoding is incremental and bounded: one `decode` call returns at most `SLICE_BYTES` and reads
at most `INPUT_BYTES` of the input it was given; whatever is left stays pending (`pending`)
until the next call. A 100 KB gzip body that expands to 100 MB therefore costs many short calls
the caller can interleave with other work, never one long one, and never 100 MB of memory. An
identity read too costly to analyse in one call (`must_slice`) is sliced the same way.
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import Any

# The most bytes one `decode` call returns: the tap analyses one slice per call, so this bounds
# how long one call holds the event loop. The cost per byte depends on what the bytes hold:
# ~0.04 us for real LLM events, up to ~1.2 us for 8-byte events, ~0.45 us for blank lines
# (`python -m bench.decoder`, and a peer chooses). 16 KiB is then ~1 ms of real events and at
# most ~20 ms of the worst, under the ~50 ms a proxy may stall its other streams; smaller
# slices only add per-call overhead. (128 KiB of blank lines held the loop for 60-600 ms.)
SLICE_BYTES = 16 * 1024
# Line ends an identity read may hold and still be analysed whole, however large: the cost
# of the analysis is per line (an event is a few), the bytes of a long line go through C
# loops. 4,096 line ends are what a slice of the costliest events holds (16 KiB of 8-byte
# events), so such a read costs about as much as a slice; a bulk read of real events
# (~250 bytes each) or of large ones stays whole, uncopied, on the tap's fast path.
LINES_PER_READ = 4096
# The most compressed input one call hands the inflater. zlib copies what a call leaves
# unconsumed (`unconsumed_tail`) on every call, so input given whole would make each call
# cost as much as the compressed backlog (megabytes) however little it returns.
INPUT_BYTES = 16 * 1024
# What a slice costs to analyse is per line, so after a slice denser than LINES_PER_SLICE
# line ends the next ones shrink to hold about that many (never under MIN_SLICE_BYTES), and
# grow back as the lines thin out (never over SLICE_BYTES): a body
# of blank lines (a gzip bomb's favourite) costs ~1 ms a slice, not the ~16 ms of 16 KiB of
# them, while real events (~250 bytes each) keep whole 16 KiB slices.
LINES_PER_SLICE = 1024
MIN_SLICE_BYTES = 1024


def must_slice(data: bytes) -> bool:
    """Is this identity read too costly to analyse in one call: larger than a slice and
    holding more than LINES_PER_READ line ends (CR or LF: SSE ends lines with either)?

    Every large read of a stream is asked this, so CRs are counted only when there is one:
    `in` is a memchr, a count is a byte-by-byte loop (two counts were 12 % of the proxy's
    instructions in bulk)."""
    if len(data) <= SLICE_BYTES:
        return False
    lines = data.count(b"\n")
    if lines > LINES_PER_READ:
        return True
    return b"\r" in data and lines + data.count(b"\r") > LINES_PER_READ


class ContentDecodingError(Exception):
    """The body could not be decoded with its declared Content-Encoding."""


def brotli_module() -> Any:
    try:
        import brotli  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        try:
            import brotlicffi as brotli  # type: ignore[import-not-found,unused-ignore,no-redef]
        except ImportError:
            return None
    return brotli


class BodyDecoder:
    """Incremental decoder for identity, gzip, deflate (zlib or raw) and br (if installed)."""

    def __init__(self, encoding: str | None) -> None:
        self.encoding = (encoding or "identity").strip().lower()
        self._zlib: Any = None
        self._brotli: Any = None
        self._deflate_probe = False
        self._probe_bytes = b""
        # Input received but not yet decoded (given to the codec INPUT_BYTES at a time, or
        # returned SLICE_BYTES at a time for identity), from `_offset` in its first piece.
        self._input: deque[bytes] = deque()
        self._input_bytes = 0
        self._offset = 0
        # Identity: held bytes still to return before the mark (`mark`); None: no mark.
        self._until_mark: int | None = None
        self.mark_reached = False  # the last slice returned ended at the mark
        self._more = False  # the last slice was full: output may be waiting without new input
        self._spill = b""  # br output beyond the slice, returned by the next call
        self._slice = SLICE_BYTES  # the next slice's size, by the line density of the last
        if self.encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.encoding == "deflate":
            self._zlib = zlib.decompressobj()
            self._deflate_probe = True  # some servers send raw deflate without the zlib header
        elif self.encoding == "br":
            module = brotli_module()
            if module is None:
                raise ContentDecodingError("br (install brotli to analyse it)")
            self._brotli = module.Decompressor()
            if not hasattr(self._brotli, "can_accept_more_data"):
                # Before brotli 1.2 the output of one call cannot be bounded.
                raise ContentDecodingError("br (brotli>=1.2 needed to analyse it safely)")
        elif self.encoding != "identity":
            raise ContentDecodingError(f"unsupported content-encoding {self.encoding!r}")

    @property
    def identity(self) -> bool:
        return self._zlib is None and self._brotli is None and not self._deflate_probe

    @property
    def pending(self) -> bool:
        """Input already received may still yield output: call `decode(b"")` again."""
        return self._more or bool(self._input_bytes)

    @property
    def retained_bytes(self) -> int:
        """Input bytes held (the codec's own window, at most 32 KiB for zlib, aside)."""
        tail = len(self._zlib.unconsumed_tail) if self._zlib is not None else 0
        return tail + self._input_bytes + len(self._probe_bytes) + len(self._spill)

    def decode(self, data: bytes) -> bytes:
        """Take `data` (may be empty) and return the next slice of at most `SLICE_BYTES`.

        Identity input of at most a slice, with nothing held before it, is returned as it
        came (the usual chunk: no copy).
        """
        if self._zlib is None and self._brotli is None and not self._deflate_probe:
            until = self._until_mark
            if until is None:
                if not self._input_bytes and not must_slice(data):
                    return data
                self._hold(data)
                return self._fit(self._take(self._slice))
            self._hold(data)
            out = self._fit(self._take(min(self._slice, until)))  # never straddles the mark
            self._until_mark = until - len(out)
            self.mark_reached = self._until_mark == 0
            if self.mark_reached:
                self._until_mark = None
            return out
        try:
            if self._brotli is not None:
                return self._fit(self._unbrotli(data))
            return self._fit(self._inflate(data))
        except Exception as exc:  # zlib.error, brotli.error: any failure means undecodable
            self._more, self._spill = False, b""
            self._drop_input()
            raise ContentDecodingError(f"{self.encoding}: {exc}") from exc

    def mark(self) -> None:
        """Identity: end a slice where the input held now ends (`mark_reached` tells when)."""
        self._until_mark = self._input_bytes if self._input_bytes else None
        self.mark_reached = False

    def hold(self, data: bytes) -> None:
        """Keep identity input for later `decode` calls, decoding none of it now."""
        if not self.identity:
            raise ValueError("only identity input is held undecoded")
        self._hold(data)

    def _hold(self, data: bytes) -> None:
        if data:
            self._input.append(data)
            self._input_bytes += len(data)

    def _take(self, size: int) -> bytes:
        """The next `size` bytes of held input at most (fewer when less is held)."""
        pieces: list[bytes] = []
        need = size
        held = self._input
        while need and held:
            head, start = held[0], self._offset
            left = len(head) - start
            if left <= need:
                pieces.append(head[start:] if start else head)
                held.popleft()
                self._offset = 0
                need -= left
            else:
                pieces.append(head[start : start + need])
                self._offset = start + need
                need = 0
        self._input_bytes -= size - need
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _drop_input(self) -> None:
        self._input.clear()
        self._input_bytes = self._offset = 0

    def _inflate(self, data: bytes) -> bytes:
        if self._deflate_probe:
            # "deflate" should be zlib-wrapped (RFC 9110) but some servers send raw deflate:
            # the two-byte zlib header tells them apart, so hold bytes until there are two.
            self._probe_bytes += data
            if len(self._probe_bytes) < 2:
                return b""
            data, self._probe_bytes = self._probe_bytes, b""
            self._deflate_probe = False
            cmf, flg = data[0], data[1]
            if cmf & 0x0F != 8 or (cmf * 256 + flg) % 31:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        inflater = self._zlib
        if inflater.eof:
            self._more = False
            self._drop_input()
            return b""  # bytes after the end of the compressed stream are not body
        self._hold(data)
        # What the last call left unconsumed first, new input only once it is used up.
        source = inflater.unconsumed_tail or self._take(INPUT_BYTES)
        out: bytes = inflater.decompress(source, self._slice)
        if inflater.eof:
            self._drop_input()
        self._more = bool(inflater.unconsumed_tail) or (
            len(out) == self._slice and not inflater.eof
        )
        return out

    def _unbrotli(self, data: bytes) -> bytes:
        # brotli's output_buffer_limit is soft (a call may return up to about twice it) and
        # output can remain after it accepts input again: the excess waits in `_spill`, and a
        # call that produced output is followed by another until one produces none.
        decompressor = self._brotli
        self._hold(data)
        if self._spill:
            size = self._slice
            out, self._spill = self._spill[:size], self._spill[size:]
            self._more = True
            return out
        source = b""
        if self._input_bytes and decompressor.can_accept_more_data():
            source = self._take(INPUT_BYTES)
        out = decompressor.process(source, output_buffer_limit=self._slice)
        if len(out) > self._slice:
            out, self._spill = out[: self._slice], out[self._slice :]
        accepts = decompressor.can_accept_more_data()
        if not (source or out or accepts):
            raise ContentDecodingError("decoder made no progress")
        finished = decompressor.is_finished()
        self._more = bool(self._spill) or not accepts or (bool(out) and not finished)
        return bytes(out)

    def _fit(self, out: bytes) -> bytes:
        """`out`, after sizing the next slice by its line density (LINES_PER_SLICE)."""
        lines = out.count(b"\n") + out.count(b"\r")
        # By density, both ways: a slice at the bound keeps the next as large (resetting it
        # to SLICE_BYTES made a body of blank lines alternate 1 KiB and 16 KiB slices).
        size = len(out) * LINES_PER_SLICE // lines if lines else SLICE_BYTES
        self._slice = min(SLICE_BYTES, max(MIN_SLICE_BYTES, size))
        return out

    def finish(self) -> bool:
        """True when the compressed stream ended where the bytes did."""
        if self._zlib is not None:
            return bool(self._zlib.eof)
        if self._brotli is not None:
            return bool(self._brotli.is_finished())
        return True
