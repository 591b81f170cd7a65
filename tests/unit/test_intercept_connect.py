"""The CONNECT head (RFC 9110 §9.3.6: `CONNECT host:port HTTP/1.1`, authority-form) and the
absolute-form request (`GET http://host/path HTTP/1.1`, RFC 9112 §3.2.2), read within
MAX_HEAD_BYTES whatever the chunking. Heads as curl, httpx and Node's undici send them."""

from __future__ import annotations

import pytest

from sseproxy.intercept.connect import (
    MAX_HEAD_BYTES,
    Connect,
    Forward,
    HeadReader,
    HeadRefused,
    parse_head,
)
from sseproxy.intercept.destination import Destination

# curl 8 -x http://127.0.0.1:8791 https://api.openai.com/
CURL = (
    b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n"
    b"User-Agent: curl/8.5.0\r\nProxy-Connection: Keep-Alive\r\n\r\n"
)


def feed_all(data: bytes, step: int) -> Connect | Forward | None:
    reader = HeadReader()
    result = None
    for i in range(0, len(data), step):
        result = reader.feed(data[i : i + step])
        if result is not None:
            return result
    return result


@pytest.mark.parametrize("step", [1, 2, 3, 7, len(CURL)])
def test_curls_head_in_any_chunking(step: int) -> None:
    assert feed_all(CURL, step) == Connect(Destination("api.openai.com", 443), b"")


def test_bytes_after_the_head_are_kept() -> None:
    got = HeadReader().feed(CURL + b"\x16\x03\x01")
    assert got == Connect(Destination("api.openai.com", 443), b"\x16\x03\x01")


def test_an_incomplete_head_asks_for_more() -> None:
    assert HeadReader().feed(CURL[:-2]) is None


@pytest.mark.parametrize(
    ("line", "destination"),
    [
        (b"CONNECT API.OpenAI.com:443 HTTP/1.1", Destination("api.openai.com", 443)),
        (b"CONNECT 127.0.0.1:8443 HTTP/1.0", Destination("127.0.0.1", 8443)),
        (b"CONNECT [::1]:443 HTTP/1.1", Destination("::1", 443)),
        (b"CONNECT [2001:DB8::1]:443 HTTP/1.1", Destination("2001:db8::1", 443)),
        (b"CONNECT chatgpt.com:65535 HTTP/1.1", Destination("chatgpt.com", 65535)),
    ],
)
def test_targets(line: bytes, destination: Destination) -> None:
    assert parse_head(line + b"\r\n\r\n") == destination


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1", 400),  # origin-form: a base URL pointed here by mistake
        (b"GET https://example.com/ HTTP/1.1", 400),  # https is a CONNECT
        (b"GET ftp://example.com/ HTTP/1.1", 400),
        (b"GET http://user@example.com/ HTTP/1.1", 400),
        (b"GET http://example.com/#top HTTP/1.1", 400),
        (b"GET http://example.com:0/ HTTP/1.1", 400),
        (b"GET http:///path HTTP/1.1", 400),
        (b"G(T http://example.com/ HTTP/1.1", 400),  # not a method token
        (b"CONNECT example.com HTTP/1.1", 400),  # no port
        (b"CONNECT example.com:0 HTTP/1.1", 400),
        (b"CONNECT example.com:65536 HTTP/1.1", 400),
        (b"CONNECT example.com:443x HTTP/1.1", 400),
        (b"CONNECT exa mple.com:443 HTTP/1.1", 400),
        (b"CONNECT user@example.com:443 HTTP/1.1", 400),
        (b"CONNECT example..com:443 HTTP/1.1", 400),
        (b"CONNECT [::1:443 HTTP/1.1", 400),
        (b"CONNECT [zz::1]:443 HTTP/1.1", 400),
        (b"CONNECT \xc3\xa9.com:443 HTTP/1.1", 400),
        (b"CONNECT example.com:443 HTTP/2", 400),
        (b"CONNECT example.com:443", 400),
    ],
)
def test_refused_heads(head: bytes, status: int) -> None:
    with pytest.raises(HeadRefused) as refused:
        HeadReader().feed(head + b"\r\n\r\n")
    assert refused.value.status == status


def head_of(size: int) -> bytes:
    """A well-formed CONNECT head of exactly `size` bytes (a padding header line)."""
    start = b"CONNECT example.com:443 HTTP/1.1\r\nX-Pad: "
    end = b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def test_a_head_at_the_bound_is_read_and_one_byte_more_is_refused() -> None:
    at = head_of(MAX_HEAD_BYTES)
    assert len(at) == MAX_HEAD_BYTES
    assert HeadReader().feed(at) == Connect(Destination("example.com", 443), b"")
    with pytest.raises(HeadRefused) as refused:
        HeadReader().feed(head_of(MAX_HEAD_BYTES + 1))
    assert refused.value.status == 431


def test_an_endless_head_is_refused_once_past_the_bound() -> None:
    reader = HeadReader()
    assert reader.feed(b"CONNECT example.com:443 HTTP/1.1\r\n") is None
    assert reader.feed(b"a" * (MAX_HEAD_BYTES - 34)) is None  # at the bound: still waiting
    with pytest.raises(HeadRefused):
        reader.feed(b"a")  # one byte more


# curl 8 -x http://127.0.0.1:8791 http://example.com/v1/models?x=1 (and a few more lines)
CURL_PLAIN = (
    b"GET http://Example.com/v1/models?x=1 HTTP/1.1\r\nHost: example.com\r\n"
    b"User-Agent: curl/8.5.0\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\n"
    b"Proxy-Authorization: Basic dTpw\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
    b"Keep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nhi"
)


@pytest.mark.parametrize("step", [1, 5, len(CURL_PLAIN) - 1, len(CURL_PLAIN)])
def test_an_absolute_form_request_is_rewritten_as_a_proxy_forwards_it(step: int) -> None:
    got = feed_all(CURL_PLAIN, step)
    end = CURL_PLAIN.index(b"\r\n\r\n") + 4
    came_with_the_head = CURL_PLAIN[end : ((end - 1) // step + 1) * step]
    assert got == Forward(
        Destination("example.com", 80),
        "GET",
        b"GET /v1/models?x=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\n"
        b"Accept: */*\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
        came_with_the_head,
    )


@pytest.mark.parametrize(
    ("target", "destination", "line", "host"),
    [
        ("http://h.test", Destination("h.test", 80), b"POST / HTTP/1.1", b"h.test"),
        ("http://h.test?q", Destination("h.test", 80), b"POST /?q HTTP/1.1", b"h.test"),
        ("http://h.test:8080/a", Destination("h.test", 8080), b"POST /a HTTP/1.1", b"h.test:8080"),
        ("HTTP://127.0.0.1:80/", Destination("127.0.0.1", 80), b"POST / HTTP/1.1", b"127.0.0.1"),
        ("http://[::1]/x", Destination("::1", 80), b"POST /x HTTP/1.1", b"[::1]"),
        ("http://[::1]:81/x", Destination("::1", 81), b"POST /x HTTP/1.1", b"[::1]:81"),
    ],
)
def test_absolute_form_targets(
    target: str, destination: Destination, line: bytes, host: bytes
) -> None:
    got = HeadReader().feed(f"POST {target} HTTP/1.1\nHost: spoofed.test\n\n".encode())
    assert isinstance(got, Forward)
    assert got.destination == destination
    assert got.head == line + b"\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"


def plain_head_of(size: int) -> bytes:
    start = b"GET http://example.com/ HTTP/1.1\r\nX-Pad: "
    end = b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def test_an_absolute_form_head_at_the_bound_is_read_and_one_byte_more_is_refused() -> None:
    at = plain_head_of(MAX_HEAD_BYTES)
    assert len(at) == MAX_HEAD_BYTES
    got = HeadReader().feed(at)
    assert isinstance(got, Forward) and got.destination == Destination("example.com", 80)
    with pytest.raises(HeadRefused) as refused:
        HeadReader().feed(plain_head_of(MAX_HEAD_BYTES + 1))
    assert refused.value.status == 431


@pytest.mark.parametrize("line", [b" folded", b"No-Colon", b"Bad Name: x"])
def test_a_malformed_header_line_is_refused(line: bytes) -> None:
    with pytest.raises(HeadRefused) as refused:
        HeadReader().feed(b"GET http://h.test/ HTTP/1.1\r\nA: b\r\n" + line + b"\r\n\r\n")
    assert refused.value.status == 400
