"""A compressed request body, decoded for the request-aware facts only (`model`, `stream`, the
JSON-RPC id and method): the upstream gets the client's bytes untouched.

Some agents send their request bodies with `Content-Encoding: zstd`, `gzip` or `br`; without
this the record shows neither the model nor whether a stream was asked for. Decoding is
bounded: at most `MAX_DECODED_BYTES` come out (the size up to which a body is parsed at all,
`request.MAX_PARSED_BODY_BYTES`); a body that decodes to more, that is cut or malformed, or
whose codec is not installed gives no facts, as an undecodable body always did.

gzip and deflate use the standard library, br the decoder the response side uses
(`core.encoding`: `brotli` >= 1.2 or `brotlicffi`, when installed), zstd the `zstandard`
package when installed (Python 3.11 has no zstd of its own; `pip install 'sseproxy[zstd]'`).
"""

from __future__ import annotations

import io
from enum import StrEnum
from typing import Any

from sseproxy.core.encoding import BodyDecoder, ContentDecodingError
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
    """The decoded body (the body itself when it is not encoded), or why there is none."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity") or not body:
        return body
    if "," in encoding:  # several codings stacked: no real client sends them
        return Undecoded.UNSUPPORTED
    if encoding == "zstd":
        return _unzstd(body, cap)
    try:
        decoder = BodyDecoder(encoding)
    except ContentDecodingError:
        return Undecoded.UNSUPPORTED
    parts: list[bytes] = []
    size = 0
    try:
        piece = decoder.decode(body)
        while True:
            size += len(piece)
            if size > cap:
                return Undecoded.TOO_LARGE
            parts.append(piece)
            if not decoder.pending:
                break
            piece = decoder.decode(b"")
        if not decoder.finished:
            return Undecoded.MALFORMED
    except ContentDecodingError:
        return Undecoded.MALFORMED
    return b"".join(parts)


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
