"""The cheaper per-request paths of the shell give exactly what the straightforward ones give:
the record rendered once for json_ready and the log line. The references are the plain calls
(`json_ready`, the line without a rendering) or hand-written expectations."""

from __future__ import annotations

import dataclasses
import datetime
import io
import logging
import re
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import unquote

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from bench.record_cost import CASES, exchange
from sseproxy.config import Route
from sseproxy.core import TapOptions
from sseproxy.core.inject import parse_rules
from sseproxy.core.request import RequestFacts as CoreRequestFacts
from sseproxy.inspector.endpoints import Inspector, StreamView, Viewer
from sseproxy.observe import log
from sseproxy.observe import redact as redact_module
from sseproxy.observe.log import json_ready, json_rendered
from sseproxy.observe.redact import REDACTED, SECRET_KEYS, SENSITIVE_NAME, Secrets
from sseproxy.shell import record as records
from sseproxy.shell import state as state_module
from sseproxy.shell import upstream
from sseproxy.shell.admission import INJECT_HEADER
from sseproxy.shell.tapping import tap_options
from sseproxy.shell.upstream import headers as upstream_headers
from tests.unit.test_record_paths import (
    built_records,
    request_secrets,
    unstamped,
    values,
)
from tests.unit.test_record_paths import texts as key_texts

# -- one rendering for the redaction's check, json_ready and the log line --------------------


@given(st.dictionaries(key_texts, values | st.integers(), max_size=6))
def test_json_rendered_is_json_ready_and_its_json(record: dict[str, Any]) -> None:
    ready, rendered = json_rendered(record)
    assert ready == json_ready(record)
    if rendered is not None:
        assert ready is record
        assert rendered == orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)


def test_json_rendered_rebuilds_what_json_cannot_carry() -> None:
    record = {"big": 2**70, "text": "a\ud800b", "n": 1}
    assert json_rendered(record) == ({"big": str(2**70), "text": "a\ufffdb", "n": 1}, None)
    assert json_rendered({"n": 1}) == ({"n": 1}, b'{"n":1}')


def test_the_bench_records_are_rendered_once() -> None:
    for case in CASES:
        facts, progress = exchange(case)
        verdict, pacing = records.verdict_of(facts, progress)
        record, rendered = records.build_rendered(facts, progress, verdict, pacing)
        assert rendered is not None  # the usual record: its check's rendering is kept
        assert isinstance(record, MappingProxyType)
        assert rendered == orjson.dumps(dict(record), option=orjson.OPT_NON_STR_KEYS)


def line(record: Mapping[str, Any], level: int, rendered: bytes | None) -> str:
    stream = io.StringIO()
    log.configure("json", "debug", stream, cache=False)
    log.request_finished(record, level, rendered)
    return stream.getvalue()


def test_a_spliced_line_is_the_line_rendered_whole() -> None:
    for record in built_records():
        rendered = orjson.dumps(dict(record), option=orjson.OPT_NON_STR_KEYS)
        for level in (logging.INFO, logging.WARNING, logging.ERROR):
            assert unstamped(line(record, level, rendered)) == unstamped(line(record, level, None))
    empty: Mapping[str, Any] = MappingProxyType({})
    assert unstamped(line(empty, logging.INFO, b"{}")) == (
        '{"timestamp":"T","level":"info","event":"request.finished"}\n'
    )


@given(st.dictionaries(key_texts, values, max_size=6), request_secrets)
def test_a_built_record_logs_the_same_line_with_or_without_its_rendering(
    fields: dict[str, Any], found: tuple[str, ...]
) -> None:
    fields = {k: v for k, v in fields.items() if k not in ("timestamp", "level", "event")}
    ready, rendered = json_rendered(Secrets(found).redact({"state": "completed", **fields}))
    record = MappingProxyType(ready)
    assert unstamped(line(record, logging.INFO, rendered)) == unstamped(
        line(record, logging.INFO, None)
    )


# -- a request's secrets and redacted target, in one look at the target -----------------------


def old_from_request(headers: Mapping[str, str], raw_target: str) -> Secrets:
    """Secrets.from_request before the name cache and the target's prefilter (reference,
    verbatim but for the body, which is empty here, and the name rule, which is today's:
    `_secret_name` also takes names whose last word says secret, such as `+api_key`)."""
    found: set[str] = set()
    for name, value in headers.items():
        lower = name.lower()
        if lower in SECRET_KEYS or SENSITIVE_NAME.search(lower):
            redact_module._header_values(lower, value, found)
    for match in redact_module._TARGET_PARAM.finditer(raw_target):
        if redact_module._secret_name(match.group("name")):
            value = match.group("value")
            found.update((value, unquote(value), redact_module._decoded(value)))
    return Secrets(tuple(found))


def old_redact_target(secrets: Secrets, raw_target: str) -> str:
    """Secrets.redact_target as first written (reference, verbatim but for today's name rule)."""

    def param(match: re.Match[str]) -> str:
        name = match.group("name")
        if not match.group("value") or not redact_module._secret_name(name):
            return match.group(0)
        return match.group("lead") + match.group("name") + match.group("eq") + REDACTED

    return secrets.redact_text(redact_module._TARGET_PARAM.sub(param, raw_target))


TARGET_PIECES = [
    "/v1/chat/completions",
    "/v1/x",
    "?",
    "&",
    ";",
    "#",
    "=",
    "%3F",
    "%253F",
    "%3D",
    "%26",
    "+",
    "key",
    "KEY",
    "\u212aey",  # the Kelvin sign: "key" once lowered
    "api_key",
    "x-api-key",
    "ke%79",
    "token",
    "monkey",
    "password",
    "alt=sse",
    "events=1",
    "sk-proj-abcdefgh1234",
    "secret-value-1",
    "https://u:p@h",
]
targets = st.lists(st.sampled_from(TARGET_PIECES), max_size=8).map(lambda p: "/" + "".join(p))
HEADER_NAMES = ["Authorization", "Cookie", "X-Api-Key", "X-Custom-Token", "Accept", "Host"]
HEADER_VALUES = ["Bearer secret-value-1", "a=secret-value-1; b=2", "Basic dTpzZWNyZXRwdzE=", "*/*"]
headers = st.lists(
    st.tuples(st.sampled_from(HEADER_NAMES), st.sampled_from(HEADER_VALUES)), max_size=4
).map(lambda pairs: CIMultiDictProxy(CIMultiDict(pairs)))


@given(headers, targets)
def test_of_request_is_from_request_and_redact_target(
    request_headers: CIMultiDictProxy[str], target: str
) -> None:
    expected = old_from_request(request_headers, target)
    secrets, path = Secrets.of_request(request_headers, target)
    assert secrets == expected
    assert path == old_redact_target(expected, target)
    assert Secrets.from_request(request_headers, target, b"") == expected
    assert secrets.redact_target(target) == path


def test_of_request_finds_credential_parameters() -> None:
    target = "/v1/x?alt=sse&Key=secret-value-1;ke%2579=another-value-2"
    secrets, path = Secrets.of_request(CIMultiDictProxy(CIMultiDict()), target)
    assert set(secrets.values) == {"secret-value-1", "another-value-2"}
    assert path == "/v1/x?alt=sse&Key=[redacted];ke%2579=[redacted]"
    secrets, path = Secrets.of_request(
        CIMultiDictProxy(CIMultiDict({"Authorization": "Bearer secret-value-1"})),
        "/v1/x/secret-value-1?monkey=1",
    )
    assert path == "/v1/x/" + "*" * 14 + "?monkey=1"


def test_header_names_are_remembered_up_to_their_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(redact_module, "_HEADER_NAMES", {})
    monkeypatch.setattr(redact_module, "MAX_HEADER_NAMES", 2)
    pairs = [("A", "x"), ("X-Session", "session-value-1"), ("B", "y")]
    for _ in range(2):  # past the bound: looked at as before, never remembered
        secrets, _path = Secrets.of_request(CIMultiDictProxy(CIMultiDict(pairs)), "/")
        assert secrets.values == ("session-value-1",)
    assert redact_module._HEADER_NAMES == {"A": False, "X-Session": True}


# -- forwarded request headers -----------------------------------------------------------------


def old_forwardable(headers: Mapping[str, str], drop: frozenset[str]) -> CIMultiDict[str]:
    """upstream.forwardable before the joined skip sets (reference, verbatim)."""
    named: set[str] = set()
    for value in headers.getall("Connection", []) if hasattr(headers, "getall") else []:
        named.update(token.strip().lower() for token in value.split(","))
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lower = name.lower()
        if lower in upstream.HOP_BY_HOP or lower in named or lower in drop:
            continue
        out.add(name, value)
    return out


FORWARD_NAMES = [
    "Host",
    "Content-Length",
    "Expect",
    "X-Sseproxy-Inject",
    "Connection",
    "Keep-Alive",
    "TE",
    "X-Custom",
    "x-custom",
    "Authorization",
    "Accept",
]
FORWARD_VALUES = ["keep-alive", "close, X-Custom", " x-custom ,te", "a", "Upgrade"]
header_lists = st.lists(
    st.tuples(st.sampled_from(FORWARD_NAMES), st.sampled_from(FORWARD_VALUES)), max_size=8
)


@given(header_lists, st.sampled_from([frozenset(), upstream.REQUEST_DROP]))
def test_forwardable_is_the_reference(pairs: list[tuple[str, str]], drop: frozenset[str]) -> None:
    for headers in (CIMultiDictProxy(CIMultiDict(pairs)), dict(pairs)):
        got, expected = upstream.forwardable(headers, drop), old_forwardable(headers, drop)
        assert list(got.items()) == list(expected.items())


def test_the_request_drop_set_names_the_drill_header() -> None:
    assert INJECT_HEADER in upstream.REQUEST_DROP
    assert {"host", "content-length", "expect"} <= upstream.REQUEST_DROP


# -- admission ---------------------------------------------------------------------------------


def test_routed_and_admitted_are_replace() -> None:
    route = Route("r", ("/v1/*",), "https://up.example", URL("https://up.example"))
    facts, _progress = exchange("chat_tool_call")
    facts = dataclasses.replace(facts, route=None, inject_rules=(), body=b"")
    assert facts.routed(route) == dataclasses.replace(facts, route=route)
    asked = CoreRequestFacts(model="m", stream=True)
    rules = parse_rules("cut-after=3")
    secrets = Secrets(("secret-value-1",))
    routed = facts.routed(route)
    assert routed.admitted(b"{}", asked, rules, secrets) == dataclasses.replace(
        routed, body=b"{}", asked=asked, inject_rules=rules, secrets=secrets
    )
    assert [f.name for f in dataclasses.fields(state_module.RequestFacts)] == [
        *("request_id", "method", "path", "started_at", "start", "route", "body"),
        *("inject_rules", "headers", "secrets", "asked"),
    ]  # routed() and admitted() pass them in this order


def test_tap_options_are_the_settings_options_built_once() -> None:
    options = tap_options(1234, 0)
    assert options == TapOptions(max_event_bytes=1234, content_chars=0)
    assert tap_options(1234, 0) is options


# -- the inspector without a viewer --------------------------------------------------------------


def test_rows_are_marked_changed_only_for_viewers() -> None:
    inspector = Inspector()
    first = StreamView("a", "POST", "/v1/x", 0.0, 0.0)
    inspector.started(first)
    assert inspector.changed == {}  # nobody to send it to
    viewer = Viewer()
    inspector.subscribers.add(viewer)
    second = StreamView("b", "POST", "/v1/x", 0.0, 0.0)
    inspector.started(second)
    assert inspector.changed == {"b": second}
    assert list(inspector.streams) == ["a", "b"]  # the ring, and so a new page, has both


# -- upstream URLs -----------------------------------------------------------------------------


def test_upstream_urls_are_the_routes_and_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(upstream_headers, "_TARGETS", {})
    monkeypatch.setattr(upstream_headers, "MAX_CACHED_TARGETS", 3)
    a = Route("a", ("/*",), "http://127.0.0.1:1", URL("http://127.0.0.1:1/base"))
    b = Route("b", ("/*",), "http://127.0.0.1:2", URL("http://127.0.0.1:2"), strip_prefix="/v1")
    targets = ["/v1/x?alt=sse", "/v1/y", "/v1/x%3Fkey=1", "/v1/z", "/" + "p" * 1100]
    for _ in range(2):  # the second time from the cache, as far as it holds them
        for route in (a, b):
            for target in targets:
                assert upstream.upstream_url(route, target) == route.target(target)
    assert len(upstream_headers._TARGETS) == 3  # bounded; the long target was never kept
    assert all(
        len(raw) <= upstream_headers.MAX_CACHED_TARGET_CHARS for _, raw in upstream_headers._TARGETS
    )
    for bad in ("/x#y", "/x y", "x"):
        for _ in range(2):  # refused each time, never remembered
            with pytest.raises(ValueError):
                upstream.upstream_url(a, bad)
    assert len(upstream_headers._TARGETS) == 3


# -- the log line's timestamp ------------------------------------------------------------------


def stamper_text(ns: int) -> str:
    """What structlog's TimeStamper(fmt="iso", utc=True) writes for the instant `ns` (its
    datetime.now rounds the clock down to the microsecond)."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    moment = epoch + datetime.timedelta(microseconds=ns // 1000)
    return moment.isoformat().replace("+00:00", "Z")


def test_utc_stamp_is_the_stampers_text(monkeypatch: Any) -> None:
    instants = [
        1_767_225_599_999_999_999,  # the last nanosecond of 2025
        1_767_225_600_000_000_000,  # 2026 begins: a whole second, no fraction
        1_767_225_600_000_000_999,  # still a whole microsecond count of zero
        1_767_225_600_000_001_000,
        1_767_225_600_123_456_789,
        1_767_225_601_000_000_500,  # the next second: its text formatted anew
        1_709_164_800_654_321_000,  # 2024-02-29
    ]
    for ns in instants:
        monkeypatch.setattr(log.time, "time_ns", lambda ns=ns: ns)
        assert log.utc_stamp() == stamper_text(ns)
    assert log.utc_stamp().startswith("2024-02-29T00:00:00.654321")


def test_the_direct_line_is_stamped_like_the_chain(monkeypatch: Any) -> None:
    ns = 1_767_225_600_250_000_000
    monkeypatch.setattr(log.time, "time_ns", lambda: ns)
    stream = io.StringIO()
    log.configure("json", "info", stream, cache=False)
    log.request_finished(MappingProxyType({"state": "completed"}), logging.INFO)
    assert orjson.loads(stream.getvalue())["timestamp"] == "2026-01-01T00:00:00.250000Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", log.utc_stamp())


# -- request ids -------------------------------------------------------------------------------


def test_request_ids_are_uuid4_hex_and_distinct() -> None:
    ids = [state_module.new_request_id() for _ in range(3 * state_module.IDS_PER_FETCH + 5)]
    assert len(set(ids)) == len(ids)
    for rid in ids:
        parsed = uuid.UUID(hex=rid)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, rid)


def test_request_ids_take_their_random_bytes_in_batches(monkeypatch: Any) -> None:
    fetched: list[int] = []

    def urandom(n: int) -> bytes:
        fetched.append(n)
        return bytes(i % 256 for i in range(n))

    monkeypatch.setattr(state_module.os, "urandom", urandom)
    state_module._fork_reset()  # as in a forked child: nothing inherited is used
    first = state_module.new_request_id()
    assert fetched == [16 * state_module.IDS_PER_FETCH]
    assert first == "000102030405460788090a0b0c0d0e0f"  # version and variant bits set
    for _ in range(state_module.IDS_PER_FETCH - 1):
        state_module.new_request_id()
    assert len(fetched) == 1
    state_module.new_request_id()  # the batch is used up: the next one is fetched
    assert len(fetched) == 2


def test_a_clean_target_seen_before_still_masks_this_requests_values(monkeypatch: Any) -> None:
    monkeypatch.setattr(redact_module, "_CLEAN_TARGETS", set())
    target = "/v1/models/secret-value-1/x?alt=sse"
    none: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
    assert Secrets.of_request(none, target) == (Secrets(), target)
    assert target in redact_module._CLEAN_TARGETS  # learnt: no credential parameter, no shape
    auth = CIMultiDictProxy(CIMultiDict({"Authorization": "Bearer secret-value-1"}))
    _secrets, path = Secrets.of_request(auth, target)
    assert path == "/v1/models/" + "*" * 14 + "/x?alt=sse"
    assert path == old_redact_target(old_from_request(auth, target), target)
    for shaped in (f"/v1/x/{'sk-' + 'a' * 20}", "/v1/x?key=secret-value-1", "/u:p@h://x"):
        Secrets.of_request(none, shaped)
        assert shaped not in redact_module._CLEAN_TARGETS  # never learnt


def test_clean_targets_stop_at_their_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(redact_module, "_CLEAN_TARGETS", set())
    monkeypatch.setattr(redact_module, "MAX_CLEAN_TARGETS", 2)
    none: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
    for target in ("/a", "/b", "/c", "/" + "d" * redact_module.MAX_CLEAN_TARGET_CHARS):
        assert Secrets.of_request(none, target) == (Secrets(), target)
    assert sorted(redact_module._CLEAN_TARGETS) == ["/a", "/b"]


def test_a_plus_before_a_secret_name_is_a_space_and_still_a_secret() -> None:
    # `+api_key` is " api_key" once form-decoded: its last word says key
    target = "/?+api_key=secret-value-1"
    secrets, path = Secrets.of_request(CIMultiDictProxy(CIMultiDict()), target)
    assert path == "/?+api_key=[redacted]"
    assert "secret-value-1" in secrets.values  # masked wherever else it appears
