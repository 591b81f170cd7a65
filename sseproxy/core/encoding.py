"""Content-Encoding for the analysis copy: the client gets the compressed bytes untouched.

Decompression is incremental and bounded: one `decode` call returns at most `SLICE_BYTES`, and
whatever the compressed input still holds stays pending (`pending`) until the next call. A
100 KB gzip body that expands to 100 MB therefore costs many short calls the caller can
interleave with other work, never one long one, and never 100 MB of memory.
"""

from __future__ import annotations

import zlib
from typing import Any

# The most decompressed bytes one `decode` call returns. The tap analyses one slice per call,
# so this bounds how long one call holds the event loop: the full tap analyses tens of MB/s
# (`python -m bench.decoder`), so 256 KiB is a few milliseconds, well under the ~50 ms a
# proxy may stall its other streams. Smaller slices only add per-call overhead.
SLICE_BYTES = 128 * 1024


class ContentDecodingError(Exception):
    """The body could not be decoded with its declared Content-Encoding."""


def _brotli() -> Any:
    try:
        import brotli  # type: ignore[import-not-found,unused-ignore]
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
        self._queue: list[bytes] = []  # br input received while output is still pending
        self._more = False  # the last slice was full: output may be waiting without new input
        self._spill = b""  # br output beyond the slice, returned by the next call
        if self.encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.encoding == "deflate":
            self._zlib = zlib.decompressobj()
            self._deflate_probe = True  # some servers send raw deflate without the zlib header
        elif self.encoding == "br":
            module = _brotli()
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
        return self._more or bool(self._queue)

    @property
    def retained_bytes(self) -> int:
        """Compressed bytes held (the codec's own window, at most 32 KiB for zlib, aside)."""
        tail = len(self._zlib.unconsumed_tail) if self._zlib is not None else 0
        queued = sum(map(len, self._queue))
        return tail + queued + len(self._probe_bytes) + len(self._spill)

    def decode(self, data: bytes) -> bytes:
        """Take `data` (may be empty) and return the next slice of at most `SLICE_BYTES`.

        Identity input is returned as it came: its size is what the network delivered.
        """
        if self._zlib is None and self._brotli is None:
            return data
        try:
            if self._brotli is not None:
                return self._unbrotli(data)
            return self._inflate(data)
        except Exception as exc:  # zlib.error, brotli.error: any failure means undecodable
            self._more, self._queue, self._spill = False, [], b""
            raise ContentDecodingError(f"{self.encoding}: {exc}") from exc

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
            return b""  # bytes after the end of the compressed stream are not body
        tail = inflater.unconsumed_tail
        out: bytes = inflater.decompress(tail + data if tail else data, SLICE_BYTES)
        self._more = bool(inflater.unconsumed_tail) or (
            len(out) == SLICE_BYTES and not inflater.eof
        )
        return out

    def _unbrotli(self, data: bytes) -> bytes:
        # brotli's output_buffer_limit is soft (a call may return up to about twice it) and
        # output can remain after it accepts input again: the excess waits in `_spill`, and a
        # call that produced output is followed by another until one produces none.
        decompressor = self._brotli
        if data:
            self._queue.append(data)
        if self._spill:
            out, self._spill = self._spill[:SLICE_BYTES], self._spill[SLICE_BYTES:]
            self._more = True
            return out
        source = b""
        if self._queue and decompressor.can_accept_more_data():
            source = b"".join(self._queue)
            self._queue = []
        out = decompressor.process(source, output_buffer_limit=SLICE_BYTES)
        if len(out) > SLICE_BYTES:
            out, self._spill = out[:SLICE_BYTES], out[SLICE_BYTES:]
        accepts = decompressor.can_accept_more_data()
        if not (source or out or accepts):
            raise ContentDecodingError("decoder made no progress")
        finished = decompressor.is_finished()
        self._more = bool(self._spill) or not accepts or (bool(out) and not finished)
        return bytes(out)

    def finish(self) -> bool:
        """True when the compressed stream ended where the bytes did."""
        if self._zlib is not None:
            return bool(self._zlib.eof)
        if self._brotli is not None:
            return bool(self._brotli.is_finished())
        return True
