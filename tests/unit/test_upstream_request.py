"""What the upstream leg writes (the request, the CONNECT) and which targets go through the
egress proxy."""

from __future__ import annotations

import base64

import pytest
from yarl import URL

from sseproxy.shell.upstream.egress import EgressProxy, ProxySettings, bypassed
from sseproxy.shell.upstream.request import request_bytes


def test_the_request_is_the_target_as_built_host_the_headers_and_a_length() -> None:
    url = URL("http://[::1]:8080/v1/a%2Fb?q=%20x&k=%E2%9C%93", encoded=True)
    wire = request_bytes("POST", url, [("X-A", "caf\udcc3\udca9")], b"{}")
    assert wire == (
        b"POST /v1/a%2Fb?q=%20x&k=%E2%9C%93 HTTP/1.1\r\nHost: [::1]:8080\r\n"
        b"X-A: caf\xc3\xa9\r\nContent-Length: 2\r\n\r\n{}"
    )


@pytest.mark.parametrize(
    "method,length", [("GET", None), ("HEAD", None), ("POST", b"0"), ("DELETE", b"0")]
)
def test_an_empty_body_has_a_length_only_where_the_method_defines_a_body(
    method: str, length: bytes | None
) -> None:
    wire = request_bytes(method, URL("https://api.example.com/v1"), [], b"")
    assert wire.startswith(b"%s /v1 HTTP/1.1\r\nHost: api.example.com\r\n" % method.encode())
    assert (b"Content-Length: 0" in wire) == (length is not None)


@pytest.mark.parametrize(
    "method,headers",
    [
        ("GET\r\nX: y", []),
        ("GET", [("X-A", "v\r\nInjected: 1")]),
        ("GET", [("X-A", "v\nInjected: 1")]),
        ("GET", [("X A", "v")]),
        ("GET", [("X-A:", "v")]),
        ("GET", [("X-A", "v\x00")]),
    ],
)
def test_a_field_that_would_split_the_request_is_refused(
    method: str, headers: list[tuple[str, str]]
) -> None:
    with pytest.raises(ValueError):
        request_bytes(method, URL("http://h/"), headers, b"")


def test_a_proxy_url_gives_its_address_and_credentials() -> None:
    proxy = EgressProxy.parse("http://us%20er:p%40ss@proxy.internal:3128")
    assert (proxy.host, proxy.port) == ("proxy.internal", 3128)
    assert proxy.authorization == "Basic " + base64.b64encode(b"us er:p@ss").decode()
    assert "p@ss" not in repr(proxy) and "cEBzcw" not in repr(proxy)
    assert EgressProxy.parse("proxy:8080") == EgressProxy("proxy", 8080)
    assert EgressProxy.parse("http://proxy") == EgressProxy("proxy", 80)
    with pytest.raises(ValueError):
        EgressProxy.parse("socks5://proxy:1080")
    secure = EgressProxy.parse("https://u:p@proxy.internal:3129")
    assert (secure.host, secure.port, secure.tls) == ("proxy.internal", 3129, True)
    assert secure.name == "https://proxy.internal:3129"  # never the credentials
    assert EgressProxy.parse("https://proxy") == EgressProxy("proxy", 443, tls=True)
    assert EgressProxy.parse("http://proxy").tls is False
    assert EgressProxy("::1", 3129, tls=True).name == "https://[::1]:3129"
    assert EgressProxy("p", 1).connect_request("::1", 443) == (
        b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n"
    )


def test_each_scheme_has_its_proxy_and_lower_case_wins() -> None:
    settings = ProxySettings.from_environ(
        {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2", "HTTP_PROXY": "p:3"}
    )
    assert settings.for_target("https", "api.example.com", 443) == EgressProxy("lower", 2)
    assert settings.for_target("http", "api.example.com", 80) == EgressProxy("p", 3)
    assert ProxySettings.from_environ({}).for_target("https", "h", 443) is None


@pytest.mark.parametrize(
    "no_proxy,host,port,expected",
    [
        ("example.com", "example.com", 443, True),
        ("example.com", "api.example.com", 443, True),
        (".example.com", "api.example.com", 443, True),
        (".example.com", "example.com", 443, True),
        ("example.com", "badexample.com", 443, False),
        ("example.com:8443", "api.example.com", 443, False),
        ("example.com:8443", "api.example.com", 8443, True),
        ("*", "anything.test", 80, True),
        ("a.test, 10.0.0.0/8", "10.1.2.3", 80, True),
        ("10.0.0.0/8", "11.0.0.1", 80, False),
        ("127.0.0.1", "127.0.0.1", 9, True),
        ("::1", "::1", 443, True),
        ("[::1]:443", "::1", 443, True),
        ("[::1]:443", "::1", 80, False),
        ("10.0.0.0/8", "ten.example", 80, False),  # a range matches addresses, never names
        ("EXAMPLE.com", "Api.Example.COM.", 443, True),
        ("", "example.com", 443, False),
    ],
)
def test_no_proxy_as_curl_reads_it(no_proxy: str, host: str, port: int, expected: bool) -> None:
    assert bypassed(no_proxy, host, port) is expected
