"""Route.target builds the upstream URL from the route alone plus the client's raw path: no
request target can reach another host, and percent-escapes reach the upstream as sent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.config import Settings, make_route, mask_userinfo
from sseproxy.target import BadTarget

SP = make_route("sp", ("/sp/*",), "http://127.0.0.1:28100", strip_prefix="/sp")
NP = make_route("np", ("/np/*",), "http://127.0.0.1:28100")
# As the attacks configured them (config validation refuses both; target holds regardless).
SP_SLASH = make_route("sp", ("/sp/*",), "http://127.0.0.1:28100", strip_prefix="/sp/")
NP_STAR = make_route("np", ("/np*",), "http://127.0.0.1:28100", strip_prefix="/np")
BASE = make_route("or", ("/or/*",), "https://openrouter.ai/api/v1", strip_prefix="/or")


def origin(route_target: object) -> tuple[str | None, str | None, int | None]:
    from yarl import URL

    assert isinstance(route_target, URL)
    return route_target.scheme, route_target.host, route_target.port


@pytest.mark.parametrize(
    ("route", "raw", "path_qs"),
    [
        (SP, "/sp/@127.0.0.2:28101/steal", "/@127.0.0.2:28101/steal"),
        (SP_SLASH, "/sp/@127.0.0.2:28101/steal", "/sp/@127.0.0.2:28101/steal"),
        (NP_STAR, "/np:28102/steal", "/np:28102/steal"),
        (NP_STAR, "/np@127.0.0.2:28102/steal", "/np@127.0.0.2:28102/steal"),
        (NP, "/np:28102/steal", "/np:28102/steal"),
        (SP, "/sp//127.0.0.2:28101/steal", "//127.0.0.2:28101/steal"),
        (SP, "/sp@127.0.0.2/x", "/sp@127.0.0.2/x"),  # not on a boundary: not stripped
        (SP, "/sp", "/"),
        (SP, "/sp?x=1", "/?x=1"),
        (SP, "/spx/y", "/spx/y"),
        (BASE, "/or/chat/completions", "/api/v1/chat/completions"),
        (BASE, "/or/@evil.example/x", "/api/v1/@evil.example/x"),
    ],
)
def test_no_request_target_reaches_another_host(route, raw: str, path_qs: str) -> None:
    url = route.target(raw)
    assert origin(url) == origin(route.url)
    assert url.raw_path_qs == path_qs


@pytest.mark.parametrize(
    ("raw", "path", "query"),
    [
        ("/v1/x%3Fkey=SECRET", "/v1/x%3Fkey=SECRET", ""),
        ("/v1/a%2Fb", "/v1/a%2Fb", ""),
        ("/v1/%2541", "/v1/%2541", ""),
        ("/v1/x?key=a%26b&q=%3F", "/v1/x", "key=a%26b&q=%3F"),
    ],
)
def test_percent_escapes_stay_encoded(raw: str, path: str, query: str) -> None:
    url = NP.target(raw)
    assert (url.raw_path, url.raw_query_string) == (path, query)
    assert str(url) == "http://127.0.0.1:28100" + raw


@pytest.mark.parametrize(
    "raw",
    [
        "http://evil/x",
        "*",
        "",
        "evil/x",
        "/a b",
        "/a#b",
        "/caf\u00e9",
        "/a\x00b",
        "/sp/..%2F@evil/x",
    ],
)
def test_targets_that_are_not_origin_form_are_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        NP.target(raw)


PATH_CHARS = st.text(alphabet=st.sampled_from("/?@:%.2Fa-_~!$&'()*+,;=[]"), min_size=0, max_size=40)


@given(PATH_CHARS)
def test_any_raw_path_keeps_the_upstream_or_is_refused(rest: str) -> None:
    for route in (SP, NP, BASE, SP_SLASH, NP_STAR):
        try:
            url = route.target("/sp" + rest)
        except BadTarget:
            continue
        assert origin(url) == origin(route.url)


def test_ipv6_upstream_and_userinfo() -> None:
    route = make_route("v6", ("/*",), "http://user:hunter2@[::1]:8080/base")
    url = route.target("/x?y")
    assert (url.host, url.port, url.raw_path, url.user) == ("::1", 8080, "/base/x", "user")
    assert "hunter2" not in str(route.describe()) and "hunter2" not in route.upstream
    assert route.describe()["upstream"] == "http://***@[::1]:8080/base"


def test_userinfo_is_masked_wherever_it_is_printed() -> None:
    assert mask_userinfo("https://u:p@h/x") == "https://***@h/x"
    assert mask_userinfo("https://h/x") == "https://h/x"
    s = Settings(upstream="http://k:secret@127.0.0.1:9")
    assert s.public_upstream == "http://***@127.0.0.1:9"
    route = s.route_for("/anything")
    assert route is not None and "secret" not in route.upstream
