"""A compressed request body is decoded, within a bound, for the request-aware facts (model,
stream): some agents send `Content-Encoding: zstd` (issue 31), and gzip and br are what HTTP
clients offer. Bodies are compressed here with the codecs' own libraries."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from sseproxy.core import request_body
from sseproxy.core.request import request_facts
from sseproxy.core.request_body import MAX_DECODED_BYTES, Undecoded, decode_request_body

brotli = pytest.importorskip("brotli")
zstandard = pytest.importorskip("zstandard")

BODY = json.dumps({"model": "gpt-5", "stream": True, "messages": []}).encode()
CODECS = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


@pytest.mark.parametrize("encoding", sorted(CODECS))
def test_each_encoding_is_decoded_for_the_facts(encoding: str) -> None:
    plain = decode_request_body(CODECS[encoding](BODY), encoding.upper())
    assert plain == BODY
    assert isinstance(plain, bytes)
    facts = request_facts("/v1/chat/completions", "", plain)
    assert (facts.model, facts.stream) == ("gpt-5", True)


def test_raw_deflate_without_the_zlib_header_is_decoded() -> None:
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert decode_request_body(raw.compress(BODY) + raw.flush(), "deflate") == BODY


@pytest.mark.parametrize("encoding", sorted(CODECS))
def test_the_cap_and_one_more(encoding: str) -> None:
    cap = 100_000
    at = b"a" * cap
    assert decode_request_body(CODECS[encoding](at), encoding, cap) == at
    over = CODECS[encoding](at + b"a")
    assert decode_request_body(over, encoding, cap) is Undecoded.TOO_LARGE


def test_the_default_cap_is_the_parse_bound_and_a_bomb_stops_there() -> None:
    at = b" " * MAX_DECODED_BYTES
    assert decode_request_body(gzip.compress(at), "gzip") == at
    bomb = gzip.compress(b" " * (64 * MAX_DECODED_BYTES))  # 256 MiB in ~256 KiB
    assert decode_request_body(bomb, "gzip") is Undecoded.TOO_LARGE
    zbomb = zstandard.ZstdCompressor().compress(b" " * (MAX_DECODED_BYTES + 1))
    assert decode_request_body(zbomb, "zstd") is Undecoded.TOO_LARGE


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_garbage_or_a_cut_body_gives_no_body(encoding: str) -> None:
    assert decode_request_body(b"not compressed at all", encoding) is Undecoded.MALFORMED
    cut = CODECS[encoding](BODY)[:-6]
    result = decode_request_body(cut, encoding)
    # zstd's reader returns what it could decode of a cut frame: never the whole body
    assert result is Undecoded.MALFORMED or (isinstance(result, bytes) and result != BODY)


def test_identity_and_unknown_encodings() -> None:
    assert decode_request_body(BODY, None) == BODY
    assert decode_request_body(BODY, "identity") == BODY
    assert decode_request_body(b"x", "compress") is Undecoded.UNSUPPORTED
    assert decode_request_body(gzip.compress(BODY), "gzip, br") is Undecoded.UNSUPPORTED


def test_zstd_without_the_zstandard_package_is_unsupported(monkeypatch) -> None:
    monkeypatch.setattr(request_body, "_zstd", lambda: None)
    data = CODECS["zstd"](BODY)
    assert decode_request_body(data, "zstd") is Undecoded.UNSUPPORTED
