"""WHATWG event-stream conformance cases (PROTOCOLS.md §1.6), as data.

Each case: a name, the input as a list of network reads, the expected dispatched events as
(type, data, id) triples, and optionally the expected last-event-ID, retry value, and whether
bytes of an unterminated block were discarded at end of input.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    reads: tuple[bytes, ...]
    events: tuple[tuple[str, str, str], ...]
    last_event_id: str | None = None
    retry: int | None = None
    partial: bool = False
    comments: int | None = None


def m(data: str, event_id: str = "") -> tuple[str, str, str]:
    return ("message", data, event_id)


LONG = b"x" * 2048

CASES = [
    # line endings and chunking
    Case("lf", (b"data: a\n\n",), (m("a"),)),
    Case("crlf", (b"data: a\r\n\r\n",), (m("a"),)),
    Case("cr", (b"data: a\r\r",), (m("a"),)),
    Case("lf_then_crlf", (b"data: a\n\r\n",), (m("a"),)),
    Case("split_crlf_is_one_terminator", (b"data: a\r", b"\ndata: b\n\n"), (m("a\nb"),)),
    Case("blank_line_split_across_reads", (b"data: a\r\n", b"\r\n"), (m("a"),)),
    Case("trailing_cr_at_eof_is_a_line_end", (b"data: a\n\r",), (m("a"),)),
    Case(
        "wpt_format_comments",
        (
            b"data:1\r:\0\n:\r\ndata:2\n:"
            + LONG
            + b"\rdata:3\n:data:fail\r:"
            + LONG
            + b"\ndata:4\n\n",
        ),
        (m("1\n2\n3\n4"),),
        comments=5,
    ),
    Case("leading_blank_line", (b"\ndata: a\n\n",), (m("a"),)),
    Case("extra_blank_lines", (b"data: a\n\n\n\n",), (m("a"),)),
    # encoding and BOM
    Case("bom", (b"\xef\xbb\xbfdata: a\n\n",), (m("a"),)),
    Case("bom_split", (b"\xef", b"\xbb", b"\xbfdata: a\n\n"), (m("a"),)),
    Case(
        "second_bom_is_content",
        (b"\xef\xbb\xbf\xef\xbb\xbfdata: 1\n\ndata: 2\n\n",),
        (m("2"),),
    ),
    Case("mid_stream_bom", (b"data: a\n\n\xef\xbb\xbfdata: b\n\n",), (m("a"),)),
    Case("split_euro_sign", (b"data: \xe2\x82", b"\xac\n\n"), (m("€"),)),
    Case("invalid_byte", (b"data: \xff\n\n",), (m("\ufffd"),)),
    Case("truncated_sequence", (b"data: \xf0\x9f\x98A\n\n",), (m("\ufffdA"),)),
    Case("overlong", (b"data: \xc0\xaf\n\n",), (m("\ufffd\ufffd"),)),
    Case("surrogate_bytes", (b"data: \xed\xa0\x80\n\n",), (m("\ufffd\ufffd\ufffd"),)),
    Case("utf8_ellipsis", (b"data: ok\xe2\x80\xa6\n\n",), (m("ok…"),)),
    Case("nul_in_data", (b"data: \0\n\n",), (m("\0"),)),
    Case("split_cjk", (b"data: \xe4\xb8", b"\xad\xe6", b"\x96\x87\n\n"), (m("中文"),)),
    # end of stream
    Case("unterminated_line", (b"data: a",), (), partial=True),
    Case("no_blank_line", (b"data: a\n",), (), partial=True),
    Case("cr_then_eof", (b"data: a\r",), (), partial=True),
    Case("second_event_unterminated", (b"data: a\n\ndata: b\n",), (m("a"),), partial=True),
    Case("complete_stream_no_partial", (b"data: a\n\n",), (m("a"),), partial=False),
    Case("trailing_comment_is_not_partial", (b"data: a\n\n: ping\n",), (m("a"),), comments=1),
    Case("unterminated_done", (b"data: [DONE]",), (), partial=True),
    # field parsing
    Case("data_without_colon", (b"data\n\n",), (m(""),)),
    Case("data_colon_empty", (b"data:\n\n",), (m(""),)),
    Case("two_bare_data", (b"data\ndata\n\n",), (m("\n"),)),
    Case("multi_line", (b"data: a\ndata: b\n\n",), (m("a\nb"),)),
    Case("one_trailing_lf_removed", (b"data: a\ndata:\n\n",), (m("a\n"),)),
    Case("empty_middle_line", (b"data: a\ndata:\ndata: b\n\n",), (m("a\n\nb"),)),
    Case("no_space", (b"data:a\n\n",), (m("a"),)),
    Case("only_one_space_removed", (b"data:  a\n\n",), (m(" a"),)),
    Case("tab_kept", (b"data:\ta\n\n",), (m("\ta"),)),
    Case("trailing_space_kept", (b"data: a \n\n",), (m("a "),)),
    Case("split_at_first_colon", (b"data: a:b:c\n\n",), (m("a:b:c"),)),
    Case("json_over_two_lines", (b'data: {"x":\ndata: 1}\n\n',), (m('{"x":\n1}'),)),
    Case("case_sensitive_name", (b"Data: a\n\n",), ()),
    Case("name_with_trailing_space", (b"data : a\n\n",), ()),
    Case("name_with_leading_space", (b" data: a\n\n",), ()),
    Case("whitespace_line_is_a_field", (b"data: a\n   \ndata: b\n\n",), (m("a\nb"),)),
    Case("unknown_field_ignored", (b"foo: bar\ndata: a\n\n",), (m("a"),)),
    # comments
    Case("comment_only", (b": hello\n\n",), (), comments=1),
    Case("empty_comment", (b":\n\n",), (), comments=1),
    Case("comments_inside_block", (b": c1\ndata: a\n: c2\ndata: b\n\n",), (m("a\nb"),), comments=2),
    # event type
    Case("typed", (b"event: add\ndata: a\n\n",), (("add", "a", ""),)),
    Case(
        "type_resets_after_dispatch",
        (b"event: add\ndata: a\n\ndata: b\n\n",),
        (("add", "a", ""), m("b")),
    ),
    Case("type_of_dropped_block_resets", (b"event: add\n\ndata: b\n\n",), (m("b"),)),
    Case("empty_type_defaults", (b"event: \ndata: a\n\n",), (m("a"),)),
    Case("empty_type_no_space", (b"event:\ndata: a\n\n",), (m("a"),)),
    Case("last_type_wins", (b"event: a\nevent: b\ndata: x\n\n",), (("b", "x", ""),)),
    # id / lastEventId
    Case("id_persists", (b"id: 1\ndata: a\n\ndata: b\n\n",), (m("a", "1"), m("b", "1"))),
    Case("bare_id_resets", (b"id: 1\ndata: a\n\nid\ndata: b\n\n",), (m("a", "1"), m("b", ""))),
    Case(
        "id_with_nul_ignored",
        (b"id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n",),
        (m("a", "1"), m("b", "1")),
    ),
    Case("id_without_data_still_sets", (b"id: 5\n\n",), (), last_event_id="5"),
    Case(
        "id_of_undispatched_block",
        (b"data: a\n\nid: 9\ndata: b",),
        (m("a"),),
        last_event_id="",
        partial=True,
    ),
    Case(
        "id_of_unterminated_block_ignored",
        (b"id: 3\ndata: a\n\nid: 4\ndata: b",),
        (m("a", "3"),),
        last_event_id="3",
        partial=True,
    ),
    # retry
    Case("retry", (b"retry: 1500\n\n",), (), retry=1500),
    Case(
        "retry_bogus_ignored", (b"retry: 2000\nretry: 1000x\ndata: x\n\n",), (m("x"),), retry=2000
    ),
    Case("retry_negative", (b"retry: -1\n\n",), (), retry=None),
    Case("retry_fraction", (b"retry: 1.5\n\n",), (), retry=None),
    Case("retry_extra_space", (b"retry:  15\n\n",), (), retry=None),
    Case("retry_empty", (b"retry:\n\n",), (), retry=None),
    Case("retry_non_ascii_digit", ("retry: ١٢\n\n".encode(),), (), retry=None),
    # application sentinels are plain events at this layer
    Case("done_is_a_message", (b"data: [DONE]\n\n",), (m("[DONE]"),)),
]
