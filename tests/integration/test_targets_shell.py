"""Every request target gets the proxy's own answer and one record, and a route is chosen on
the path it forwards: encoded slashes never cross a prefix, dot segments in any spelling are
refused, and the escapes of unreserved characters route as the characters they stand for.
(The pure function: tests/unit/test_target.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sseproxy.config import load
from sseproxy.shell import app as app_module
from sseproxy.shell.app import create_app
from sseproxy.target import Target
from tests.integration.conftest import LogCapture, raw_exchange
from tests.integration.fake_upstream import FakeUpstream, Script, Send

ROUTES = """
[[routes]]
name = "deepseek"
paths = ["/deepseek/*"]
strip_prefix = "/deepseek"
upstream = "{url}/ds"

[[routes]]
name = "or"
paths = ["/or/*"]
strip_prefix = "/or"
upstream = "{url}/api/v1"

[[routes]]
name = "openai"
paths = ["/v1/*"]
upstream = "{url}"
"""


async def proxy(
    upstream: tuple[FakeUpstream, str], aiohttp_client: Any, tmp_path: Path
) -> tuple[FakeUpstream, Any]:
    fake, url = upstream
    fake.script("*", Script([Send(b'data: {"x": 1}\n\n')]))
    cfg = tmp_path / "routes.toml"
    cfg.write_text(ROUTES.format(url=url))
    return fake, await aiohttp_client(create_app(load(cfg)))


async def send_raw(port: int, target: str) -> tuple[int, dict[str, str], bytes]:
    """The target exactly as written: no client library normalises it first."""
    request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    answer = await raw_exchange(port, request.encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def assert_own_answer(
    status: int, headers: dict[str, str], body: bytes, record: dict[str, Any], expected: int
) -> dict[str, Any]:
    assert status == expected
    assert headers["content-type"].startswith("application/json")
    assert headers["x-sseproxy-request-id"] == record["request_id"]
    assert record["status"] == expected and record["state"] == "http_error"
    error: dict[str, Any] = json.loads(body)["error"]
    assert record["error"]["type"] == error["type"]
    return error


REFUSED = [
    "/or/../../secret",
    "/or/./chat/completions",
    "/or/..",
    "/or/%2e%2e/%2e%2e/secret",
    "/or/%2E%2e/secret",
    "/or/.%2e/secret",
    "/or/%2e./secret",
    "/or/..%2fsecret",
    "/or/..%2F..%2Fsecret",
    "/or/%252e%252e/secret",
    "/or/%252E./secret",
    "/or/..;/secret",
    "/or/..;jsessionid=1/secret",
    "/or/..%3B/secret",
    "/or/..%5Csecret",
    "/or/..%255Csecret",
    "/or/..\\secret",
    "/or/a\\b",
    "/v1/chat/completions%0A",
    "/v1/x%0d%0aX-Injected:%201",
    "/v1/x%00",
    "/v1/x%7F",
    "/v1/x%zz",
    "/or/%C0%AE%C0%AE/secret",
    "/v1/x%",
]


@pytest.mark.parametrize("target", REFUSED)
async def test_a_target_that_could_climb_or_mislead_is_refused_with_a_record(
    upstream: tuple[FakeUpstream, str],
    aiohttp_client: Any,
    tmp_path: Path,
    logs: LogCapture,
    target: str,
) -> None:
    fake, client = await proxy(upstream, aiohttp_client, tmp_path)
    status, headers, body = await send_raw(client.port, target)
    [record] = await logs.wait(1)
    error = assert_own_answer(status, headers, body, record, 400)
    assert error["type"] == "sseproxy_bad_target"
    assert fake.seen == []


ALLOWED = [
    # a query is not a path: `..` in it is just data
    (
        "/or/chat/completions?next=../../x&p=%2e%2e",
        "/api/v1/chat/completions?next=../../x&p=%2e%2e",
    ),
    # an escaped unreserved character is that character: the route and its prefix apply
    ("/deep%73eek/v1/x", "/ds/v1/x"),
    ("/%6Fr/chat/completions", "/api/v1/chat/completions"),
    # empty segments stay under the base path, as sent
    ("/or//chat", "/api/v1//chat"),
    # escapes stay data inside their segment
    ("/v1/a%2Fb/%2541", "/v1/a%2Fb/%2541"),
    (
        "/v1/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.meta/converse",
        "/v1/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.meta/converse",
    ),
    # names with dots are not dot segments
    ("/or/.well-known/a..b/...", "/api/v1/.well-known/a..b/..."),
]


@pytest.mark.parametrize(("target", "forwarded"), ALLOWED)
async def test_an_allowed_target_reaches_the_upstream_with_exactly_the_routed_path(
    upstream: tuple[FakeUpstream, str],
    aiohttp_client: Any,
    tmp_path: Path,
    logs: LogCapture,
    target: str,
    forwarded: str,
) -> None:
    fake, client = await proxy(upstream, aiohttp_client, tmp_path)
    status, headers, _ = await send_raw(client.port, target)
    [record] = await logs.wait(1)
    assert status == 200 and headers["x-sseproxy-request-id"] == record["request_id"]
    assert [seen.raw_path for seen in fake.seen] == [forwarded]


async def test_an_encoded_slash_never_reaches_a_prefix_route(
    upstream: tuple[FakeUpstream, str], aiohttp_client: Any, tmp_path: Path, logs: LogCapture
) -> None:
    """`/deepseek%2Fv1/x` is one segment: no route's `/deepseek/*` matches it (before, the
    decoded path matched and the raw one was forwarded unstripped)."""
    fake, client = await proxy(upstream, aiohttp_client, tmp_path)
    status, headers, body = await send_raw(client.port, "/deepseek%2Fv1/x")
    [record] = await logs.wait(1)
    error = assert_own_answer(status, headers, body, record, 404)
    assert error["type"] == "sseproxy_no_route"
    assert fake.seen == []


async def test_a_target_the_router_cannot_match_still_gets_the_proxy_answer_and_a_record(
    upstream: tuple[FakeUpstream, str],
    aiohttp_client: Any,
    tmp_path: Path,
    logs: LogCapture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Were a target to pass the check, aiohttp's router could still find no handler for it
    (its catch-all does not match a decoded newline): the guard answers that one too."""

    def anything(raw: str) -> Target:
        return Target(raw, "", raw)

    monkeypatch.setattr(app_module, "parse_target", anything, raising=False)
    fake, client = await proxy(upstream, aiohttp_client, tmp_path)
    status, headers, body = await send_raw(client.port, "/v1/chat/completions%0A")
    [record] = await logs.wait(1)
    error = assert_own_answer(status, headers, body, record, 404)
    assert error["type"] == "sseproxy_not_found"
    assert fake.seen == []


async def test_an_unknown_own_endpoint_gets_a_record_too(
    upstream: tuple[FakeUpstream, str], aiohttp_client: Any, tmp_path: Path, logs: LogCapture
) -> None:
    _, client = await proxy(upstream, aiohttp_client, tmp_path)
    status, headers, body = await send_raw(client.port, "/_sseproxy/nope")
    [record] = await logs.wait(1)
    assert assert_own_answer(status, headers, body, record, 404)["type"] == "sseproxy_not_found"
