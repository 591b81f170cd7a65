"""Which trailer fields may travel to the client, and the bytes that carry them."""

from __future__ import annotations

import pytest

from sseproxy.shell.upstream.trailers import FORBIDDEN, accepts_trailers, announced, section


@pytest.mark.parametrize(
    ("values", "accepts"),
    [
        (["trailers"], True),
        (["gzip;q=0.5, Trailers"], True),
        (["deflate", "trailers;q=1"], True),
        ([], False),
        (["gzip"], False),
        (["trailersx"], False),
        (["x-trailers"], False),
    ],
)
def test_te_trailers_is_a_token_of_any_te_field(values: list[str], accepts: bool) -> None:
    assert accepts_trailers(values) is accepts


def test_announced_names_are_lower_case_once_in_order_and_never_forbidden() -> None:
    values = ["X-Usage, Content-Length, x-usage", "Authorization,Set-Cookie, X-Checksum, X-Hop"]
    assert announced(values, ["keep-alive, X-Hop"], limit=100) == ("x-usage", "x-checksum")


def test_announced_names_must_be_tokens_and_are_bounded() -> None:
    assert announced(["x-a, bad name, x(b), , x-c"], limit=100) == ("x-a", "x-c")
    many = ", ".join(f"x-{i}" for i in range(10))
    assert announced([many], limit=3) == ("x-0", "x-1", "x-2")


def test_every_framing_and_hop_by_hop_name_is_forbidden() -> None:
    for name in ("content-length", "transfer-encoding", "trailer", "te", "connection", "host"):
        assert name in FORBIDDEN
    for name in ("authorization", "proxy-authorization", "set-cookie", "content-type"):
        assert name in FORBIDDEN


def test_the_section_carries_the_allowed_fields_as_sent_and_names_them() -> None:
    trailers = [
        (b"X-Usage", b"5"),
        (b"Authorization", b"Bearer x"),
        (b"x-checksum", b"abc"),
        (b"X-Usage", b"6"),
        (b"X-Late", b"1"),
    ]
    end, names = section(trailers, ("x-usage", "x-checksum"))
    assert end == b"0\r\nX-Usage: 5\r\nx-checksum: abc\r\nX-Usage: 6\r\n\r\n"
    assert names == ("x-usage", "x-checksum")


def test_a_value_with_a_control_byte_is_left_out() -> None:
    end, names = section([(b"x-a", b"1\x00"), (b"x-b", b"tab\tok")], ("x-a", "x-b"))
    assert (end, names) == (b"0\r\nx-b: tab\tok\r\n\r\n", ("x-b",))


def test_no_field_gives_the_bare_last_chunk() -> None:
    assert section([], ("x-a",)) == (b"0\r\n\r\n", ())
