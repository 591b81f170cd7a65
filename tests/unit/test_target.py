"""parse_target: what routes match is the path the upstream receives; a target that could
name another resource to some server on the way is refused. (Through the proxy:
tests/integration/test_targets_shell.py.)"""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.config import make_route
from sseproxy.target import BadTarget, parse_target

OR = make_route("or", ("/or/*",), "https://openrouter.ai/api/v1", strip_prefix="/or")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("/or/../../secret", "dot segment"),
        ("/or/.", "dot segment"),
        ("/..", "dot segment"),
        ("/or/%2e%2e/x", "dot segment"),
        ("/or/%2E%2e/x", "dot segment"),
        ("/or/.%2E/x", "dot segment"),
        ("/or/%2e/x", "dot segment"),
        ("/or/..%2f..%2fsecret", "dot segment"),
        ("/or/a%2F..%2Fb", "dot segment"),
        ("/or/%252e%252e/x", "dot segment"),  # decoded twice by some servers
        ("/or/..;/x", "dot segment"),  # `;` parameters dropped by some servers
        ("/or/.;a=b/x", "dot segment"),
        ("/or/..%3b/x", "dot segment"),
        ("/or/a\\b", "backslash"),
        ("/or/..%5Cx", "backslash"),
        ("/or/%5c", "backslash"),
        ("/or/%255C", "backslash"),
        ("/or/x%0A", "control character"),
        ("/or/x%0d", "control character"),
        ("/or/x%00", "control character"),
        ("/or/x%7f", "control character"),
        ("/or/x%250A", "control character"),
        ("/or/%C0%AE%C0%AE/secret", "not UTF-8"),  # an overlong dot
        ("/or/%FF", "not UTF-8"),
        ("/or/%25C0%25AE", "not UTF-8"),
        ("/or/x%", "malformed"),
        ("/or/x%2", "malformed"),
        ("/or/x%g0", "malformed"),
        ("/or/%%32%65", "malformed"),
        ("http://evil/x", "origin-form"),
        ("/a b", "origin-form"),
        ("/a#b", "origin-form"),
    ],
)
def test_refused(raw: str, why: str) -> None:
    with pytest.raises(BadTarget, match=why):
        parse_target(raw)
    with pytest.raises(BadTarget):
        OR.target(raw)  # the URL cannot be built from it either


@pytest.mark.parametrize(
    ("raw", "match_path", "query"),
    [
        ("/or/x?a=../../b&c=%2e%2e%0A", "/or/x", "a=../../b&c=%2e%2e%0A"),  # the query is data
        ("/deep%73eek/v1", "/deepseek/v1", ""),  # unreserved: the character itself
        ("/a%2Db%2e%5F%7E/%41", "/a-b._~/A", ""),
        ("/deepseek%2Fv1/x", "/deepseek%2Fv1/x", ""),  # reserved: stays inside its segment
        ("/m/x%3A0/y", "/m/x%3A0/y", ""),
        ("/v1/%2541", "/v1/%2541", ""),  # never decoded twice
        ("/v1/caf%C3%A9", "/v1/caf%C3%A9", ""),
        ("/or//x", "/or//x", ""),
        ("/or/.well-known/a..b/...", "/or/.well-known/a..b/...", ""),
        ("/or/x;a=b", "/or/x;a=b", ""),
        ("/", "/", ""),
        ("/x?", "/x", ""),
    ],
)
def test_allowed(raw: str, match_path: str, query: str) -> None:
    target = parse_target(raw)
    assert (target.path, target.match_path, target.query) == (
        raw.partition("?")[0],
        match_path,
        query,
    )


@pytest.mark.parametrize(
    ("raw", "prefix", "stripped"),
    [
        ("/deep%73eek/v1/x", "/deepseek", "/v1/x"),  # the prefix is stripped as matched
        ("/deepseek%2Fv1/x", "/deepseek", "/deepseek%2Fv1/x"),  # not a segment of its own
        ("/deepseekx/y", "/deepseek", "/deepseekx/y"),
        ("/deepseek", "/deepseek", "/"),
        ("/deepseek/", "/deepseek", "/"),
        ("/a/b%2Fc/d", "/a/b", "/a/b%2Fc/d"),
        ("/a/%62/c", "/a/b", "/c"),
        ("/x/y", "", "/x/y"),
    ],
)
def test_strip_removes_whole_segments_of_the_matched_form(
    raw: str, prefix: str, stripped: str
) -> None:
    assert parse_target(raw).strip(prefix) == stripped


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, written out here so that the check does not reuse the code checked."""
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    return "/" + "/".join(out)


@given(st.lists(st.sampled_from(["/", ".", "%2e", "%2E", "%2f", "%25", ";", "a", "%5c", "2e"])))
def test_an_accepted_target_stays_under_the_base_path_however_a_server_decodes_it(
    parts: list[str],
) -> None:
    raw = "/or/" + "".join(parts)
    try:
        url = OR.target(raw)
    except BadTarget:
        return
    once = unquote(url.raw_path)
    for seen in (url.raw_path, once, unquote(once)):
        resolved = remove_dot_segments(seen.replace("\\", "/"))
        assert resolved == "/api/v1" or resolved.startswith("/api/v1/"), (raw, seen)
