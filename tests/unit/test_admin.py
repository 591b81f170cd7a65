"""admin_refusal on fake requests: Host checks on loopback (DNS rebinding), the token beyond
loopback in constant time, healthz always open."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

import pytest
from aiohttp.test_utils import make_mocked_request

from sseproxy.shell import admin
from sseproxy.shell.admin import admin_refusal, host_name


@dataclass
class FakeSettings:
    host: str = "127.0.0.1"
    admin_token: str = ""
    allowed_hosts: tuple[str, ...] = ()


def request(path: str = "/_sseproxy/metrics", host: str | None = "127.0.0.1:8790", **headers):
    if host is not None:
        headers["Host"] = host
    return make_mocked_request("GET", path, headers=headers)


def status(req, settings) -> int | None:
    refused = admin_refusal(req, settings)
    return None if refused is None else refused.status


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:8790",
        "127.0.0.2",
        "localhost:8790",
        "LOCALHOST.",
        "[::1]:8790",
        "[::ffff:127.0.0.1]:8790",
    ],
)
def test_loopback_hosts_are_answered_on_loopback(host: str) -> None:
    assert status(request(host=host), FakeSettings()) is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8790",  # DNS rebinding: the attacker's name resolving to 127.0.0.1
        "evil.example",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "app.localhost:8790",  # any page can name a fresh *.localhost: no defence at all
        "x.localhost",
        "[::2]:8790",
        "",
        None,  # no Host at all
    ],
)
def test_other_hosts_get_421_on_loopback(host: str | None) -> None:
    refused = admin_refusal(request(host=host), FakeSettings())
    assert refused is not None and refused.status == 421
    assert b"sseproxy_host_not_allowed" in refused.body  # type: ignore[operator]


def test_listen_address_and_allowed_hosts() -> None:
    settings = FakeSettings(host="127.0.0.5", allowed_hosts=("Proxy.Internal:8790",))
    assert status(request(host="127.0.0.5:8790"), settings) is None
    assert status(request(host="proxy.internal"), settings) is None
    assert status(request(host="other.internal"), settings) == 421


def test_settings_without_allowed_hosts() -> None:
    @dataclass
    class Older:  # a Settings that predates allowed_hosts
        host: str = "127.0.0.1"
        admin_token: str = ""

    assert status(request(host="localhost"), Older()) is None
    assert status(request(host="evil.example"), Older()) == 421


def test_healthz_and_proxied_paths_are_not_guarded() -> None:
    beyond = FakeSettings(host="0.0.0.0", admin_token="s3cret")
    assert status(request("/_sseproxy/healthz", host="evil.example"), FakeSettings()) is None
    assert status(request("/_sseproxy/healthz", host="evil.example"), beyond) is None
    assert status(request("/v1/chat/completions", host="evil.example"), FakeSettings()) is None


def test_beyond_loopback_the_token_is_the_defence() -> None:
    settings = FakeSettings(host="0.0.0.0", admin_token="s3cret")
    good = {"Authorization": "Bearer s3cret"}
    assert status(request(host="sseproxy:8790", **good), settings) is None  # any Host
    assert status(request("/_sseproxy/events?token=s3cret", host="sseproxy"), settings) is None
    assert status(request(host="sseproxy:8790"), settings) == 403
    assert status(request(host="sseproxy", Authorization="Bearer s3cre"), settings) == 403
    assert status(request(host="sseproxy", Authorization="Bearer s3cret0"), settings) == 403
    assert status(request(host="sseproxy", Authorization="s3cret"), settings) == 403
    assert status(request(host="127.0.0.1", **good), FakeSettings(host="0.0.0.0")) == 403


def test_a_token_also_passes_the_host_check_on_loopback() -> None:
    settings = FakeSettings(admin_token="s3cret")
    assert status(request(host="proxy.lan", Authorization="Bearer s3cret"), settings) is None
    assert status(request(host="proxy.lan", Authorization="Bearer nope"), settings) == 421


def test_the_token_is_compared_in_constant_time(monkeypatch) -> None:
    calls = []
    original = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr(admin.hmac, "compare_digest", spy)
    settings = FakeSettings(host="0.0.0.0", admin_token="s3cret")
    assert status(request(host="x", Authorization="Bearer s3cXXX"), settings) == 403
    assert calls == [(b"s3cXXX", b"s3cret")]


def test_host_name() -> None:
    assert host_name("[::1]:8790") == "::1"
    assert host_name("Example.COM.:80") == "example.com"
    assert host_name("[broken") == ""


FEED = "/_sseproxy/events"


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},  # an iframe, fetch or EventSource on another site
        {"Sec-Fetch-Site": "same-site"},  # another port or *.localhost name of this machine
        {"Sec-Fetch-Site": "cross-site", "Authorization": "Bearer s3cret!"},
        {"Origin": "https://evil.example"},  # a browser without Sec-Fetch-Site
        {"Origin": "http://127.0.0.1:9999"},
        {"Origin": "null"},  # a sandboxed frame
    ],
)
def test_a_page_on_another_origin_cannot_open_the_feed(headers: dict[str, str]) -> None:
    settings = FakeSettings(admin_token="s3cret!")
    refused = admin_refusal(request(FEED, **headers), settings)
    assert refused is not None and refused.status == 403
    assert b"sseproxy_cross_site" in refused.body  # type: ignore[operator]


@pytest.mark.parametrize(
    "headers",
    [
        {},  # not a browser (curl)
        {"Sec-Fetch-Site": "same-origin"},  # the inspector's own page
        {"Sec-Fetch-Site": "none"},  # typed into the address bar
        {"Origin": "http://127.0.0.1:8790"},
    ],
)
def test_the_inspector_s_own_page_opens_the_feed(headers: dict[str, str]) -> None:
    assert status(request(FEED, **headers), FakeSettings()) is None


def test_the_cross_site_check_is_on_the_feed_only() -> None:
    """A link from another site still opens the inspector page (it cannot be framed)."""
    link = {"Sec-Fetch-Site": "cross-site"}
    assert status(request("/_sseproxy/", **link), FakeSettings()) is None
