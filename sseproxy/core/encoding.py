"""Content-Encoding for the analysis copy: the client gets the compressed bytes untouched."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

# Decompressed output is produced in pieces of at most this size, so one small compressed
# chunk (a "zip bomb") cannot make the tap allocate without bound.
PIECE_BYTES = 1024 * 1024


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
        elif self.encoding != "identity":
            raise ContentDecodingError(f"unsupported content-encoding {self.encoding!r}")

    @property
    def identity(self) -> bool:
        return self._zlib is None and self._brotli is None and not self._deflate_probe

    def decode(self, data: bytes) -> Iterator[bytes]:
        if self._zlib is None and self._brotli is None:
            yield data
            return
        try:
            if self._brotli is not None:
                yield self._brotli.process(data)
                return
            yield from self._inflate(data)
        except Exception as exc:  # zlib.error, brotli.error: any failure means undecodable
            raise ContentDecodingError(f"{self.encoding}: {exc}") from exc

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        if self._deflate_probe:
            # "deflate" should be zlib-wrapped (RFC 9110) but some servers send raw deflate:
            # the two-byte zlib header tells them apart, so hold bytes until there are two.
            self._probe_bytes += data
            if len(self._probe_bytes) < 2:
                return
            data, self._probe_bytes = self._probe_bytes, b""
            self._deflate_probe = False
            cmf, flg = data[0], data[1]
            if cmf & 0x0F != 8 or (cmf * 256 + flg) % 31:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        yield self._zlib.decompress(data, PIECE_BYTES)
        while self._zlib.unconsumed_tail:
            yield self._zlib.decompress(self._zlib.unconsumed_tail, PIECE_BYTES)

    def finish(self) -> bool:
        """True when the compressed stream ended where the bytes did."""
        if self._zlib is not None:
            return bool(self._zlib.eof)
        return True
