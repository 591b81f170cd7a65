"""A compressed request body, decoded for the request-aware facts only (`model`, `stream`, the
JSON-RPC id and method): the upstream gets the client's bytes untouched.

Some agents send their request bodies with `Content-Encoding: zstd`, `gzip` or `br`; without
this the record shows neither the model nor whether a stream was asked for. Decoding is
bounded: at most `MAX_DECODED_BYTES` come out (the size up to which a body is parsed at all,
`request.MAX_PARSED_BODY_BYTES`); a body that decodes to more, that is cut or malformed, or
whose codec is not installed gives no facts, as an undecodable body always did.

gzip and deflate use the standard library, br `brotli` >= 1.2 when installed (its
`output_buffer_limit` bounds a call's output, as on the response side), zstd the `zstandard`
package when installed (Python 3.11 has no zstd of its own; `pip install 'sseproxy[zstd]'`).
"""

from __future__ import annotations

import io
import zlib
from enum import StrEnum
from typing import Any

from sseproxy.core.encoding import brotli_module
from sseproxy.core.request import MAX_PARSED_BODY_BYTES

MAX_DECODED_BYTES = MAX_PARSED_BODY_BYTES


class Undecoded(StrEnum):
    """Why a compressed request body gave no facts."""

    TOO_LARGE = "too_large"  # it decodes to more than MAX_DECODED_BYTES
    MALFORMED = "malformed"  # not valid in its encoding, or cut short
    UNSUPPORTED = "unsupported"  # an encoding without an installed decoder, or stacked ones


def _zstd() -> Any:
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return zstandard


def decode_request_body(
    body: bytes, content_encoding: str | None, cap: int = MAX_DECODED_BYTES
) -> bytes | Undecoded:
    """The decoded body (the body itself when it is not encoded), or why there is none. One
    bounded call into the codec: at most `cap + 1` bytes are ever produced."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity") or not body:
        return body
    if encoding in ("gzip", "x-gzip"):
        return _inflate(body, (16 + zlib.MAX_WBITS,), cap)
    if encoding == "deflate":  # zlib-wrapped as the RFC says, or raw as some clients send it
        return _inflate(body, (zlib.MAX_WBITS, -zlib.MAX_WBITS), cap)
    if encoding == "br":
        return _unbrotli(body, cap)
    if encoding == "zstd":
        return _unzstd(body, cap)
    return Undecoded.UNSUPPORTED  # `compress`, several codings stacked, anything else


def _inflate(body: bytes, window_bits: tuple[int, ...], cap: int) -> bytes | Undecoded:
    for wbits in window_bits:
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(body, cap + 1)
        except zlib.error:
            continue  # deflate: try the raw form next
        if len(out) > cap:
            return Undecoded.TOO_LARGE
        return out if inflater.eof else Undecoded.MALFORMED  # a cut body yields a prefix
    return Undecoded.MALFORMED


def _unbrotli(body: bytes, cap: int) -> bytes | Undecoded:
    module = brotli_module()
    if module is None:
        return Undecoded.UNSUPPORTED
    decompressor = module.Decompressor()
    if not hasattr(decompressor, "can_accept_more_data"):
        return Undecoded.UNSUPPORTED  # before brotli 1.2 the output of a call is unbounded
    try:
        out: bytes = decompressor.process(body, output_buffer_limit=cap + 1)
    except module.error:
        return Undecoded.MALFORMED
    if len(out) > cap:
        return Undecoded.TOO_LARGE
    return out if decompressor.is_finished() else Undecoded.MALFORMED


def _unzstd(body: bytes, cap: int) -> bytes | Undecoded:
    zstandard = _zstd()
    if zstandard is None:
        return Undecoded.UNSUPPORTED
    try:
        # A stream reader returns at most what is asked: a zstd bomb stops at cap + 1 bytes.
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body))
        out: bytes = reader.read(cap + 1)
    except zstandard.ZstdError:
        return Undecoded.MALFORMED
    return Undecoded.TOO_LARGE if len(out) > cap else out
