"""Credentials found in a request, then kept out of records, targets and captured bodies."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.observe.redact import NO_SECRETS, REDACTED, Secrets
from sseproxy.shell.admin import token_matches

GROQ = "gsk_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP"
XAI = "xai-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"


def secrets_of(headers: dict[str, str], target: str = "/v1/x", body: bytes = b"") -> Secrets:
    return Secrets.from_request(headers, target, body)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Authorization": f"Bearer {GROQ}"}, GROQ),
        ({"authorization": "Token custom-token-123"}, "custom-token-123"),
        ({"X-Api-Key": "anthropic-key-1"}, "anthropic-key-1"),
        ({"api-key": "azure-key-12345"}, "azure-key-12345"),
        ({"x-goog-api-key": "google-key-123"}, "google-key-123"),
        ({"anthropic-api-key": "also-a-key-123"}, "also-a-key-123"),
        ({"X-Auth-Token": "auth-token-123"}, "auth-token-123"),
        ({"X-Portkey-Api-Key": "named-a-key-1"}, "named-a-key-1"),
        ({"Cookie": "theme=dark; session=cookie-value-1"}, "cookie-value-1"),
    ],
)
def test_credential_headers_are_collected(headers: dict[str, str], expected: str) -> None:
    secrets = secrets_of({"Content-Type": "application/json", **headers})
    assert expected in secrets.values
    assert "application/json" not in secrets.values


def test_the_mcp_session_id_is_no_credential_but_a_session_cookie_still_is() -> None:
    secrets = secrets_of(
        {"Mcp-Session-Id": "c8d29686f54345f4a1d4afce185fe99f", "X-Session-Token": "tok-123456789"}
    )
    assert secrets.values == ("tok-123456789",)


def test_basic_credentials_are_collected_encoded_and_decoded() -> None:
    token = base64.b64encode(b"user:password-123").decode()
    secrets = secrets_of({"Authorization": f"Basic {token}"})
    assert {token, "user:password-123", "password-123"} <= set(secrets.values)


@pytest.mark.parametrize(
    "target",
    [
        "/v1beta/models/g:streamGenerateContent?alt=sse&key=QUERY-SECRET",
        "/v1/x?API_KEY=QUERY-SECRET",
        "/v1/x?access_token=QUERY-SECRET&b=1",
        "/v1/x?k%65y=QUERY-SECRET",
        "/v1/x%3Fkey=QUERY-SECRET",  # a query smuggled into the path, percent-encoded
        "/v1/x%3fkey%3DQUERY-SECRET",
        "/v1/x%253Fkey%253DQUERY-SECRET",  # encoded twice
        "/v1/x?alt=sse%26key%3DQUERY-SECRET",
        "/v1/x;key=QUERY-SECRET",
    ],
)
def test_query_credentials_are_collected_and_redacted(target: str) -> None:
    secrets = secrets_of({}, target)
    assert "QUERY-SECRET" in secrets.values
    redacted = secrets.redact_target(target)
    assert "QUERY-SECRET" not in redacted
    assert redacted.endswith(REDACTED) or redacted.endswith(f"{REDACTED}&b=1")
    assert redacted.startswith("/v1")
    assert NO_SECRETS.redact_target(target) == redacted  # by name, whatever the request held


def test_an_encoded_query_value_is_collected_as_sent_and_decoded() -> None:
    secrets = secrets_of({}, "/v1/x?key=abc%2Bdef%2F012")
    assert {"abc%2Bdef%2F012", "abc+def/012"} <= set(secrets.values)


@pytest.mark.parametrize(
    "target",
    ["/v1/x?alt=sse&monkey=1", "/v1/keys/list?keyboard=qwertyuiop", "/v1/x", "/v1/x?key="],
)
def test_other_targets_are_unchanged(target: str) -> None:
    assert NO_SECRETS.redact_target(target) == target


def test_a_json_body_api_key_is_collected() -> None:
    body = b'{"model": "m", "api_key": "body-secret-1", "messages": []}'
    assert "body-secret-1" in secrets_of({}, "/v1/x", body).values
    assert secrets_of({}, "/v1/x", b'{"model": "m", "note": "body-secret-1"}').values == ()
    assert secrets_of({}, "/v1/x", b'{"api_key": ').values == ()  # not JSON: nothing, no error


def test_short_values_are_not_searched_for() -> None:
    secrets = secrets_of({"Cookie": "a=1; b=xyz", "x-api-key": "short"})
    assert secrets.values == ("a=1; b=xyz",)
    assert secrets.redact("a=1 b=xyz short") == "a=1 b=xyz short"


def test_redact_masks_values_everywhere_and_replaces_key_shapes() -> None:
    secrets = secrets_of({"Authorization": f"Bearer {GROQ}", "x-auth-token": "custom-token-1"})
    record = {
        "state": "failed",
        "error": {"message": f"Incorrect API key provided: {GROQ}", "type": "invalid_api_key"},
        "anomalies": {"custom-token-1": 1},
        "tool_calls": [{"name": "f", "args": ["x", f"echo {XAI}", "custom-token-1!"]}],
        "headers": {"authorization": "short", "x-request-id": "req_1"},
        "bytes": 12,
    }
    out = secrets.redact(record)
    assert out["error"]["message"] == "Incorrect API key provided: " + "*" * len(GROQ)
    assert out["anomalies"] == {"**************": 1}
    assert out["tool_calls"][0]["args"] == ["x", f"echo {REDACTED}", "**************!"]
    assert out["headers"] == {"authorization": REDACTED, "x-request-id": "req_1"}
    assert out["bytes"] == 12 and out["state"] == "failed"
    assert record["error"]["message"].endswith(GROQ)  # the input is not changed


def test_redact_returns_a_clean_record_itself() -> None:
    secrets = secrets_of({"Authorization": f"Bearer {GROQ}"})
    record = {"state": "completed", "path": "/v1/chat/completions", "usage": {"input": 3}}
    assert secrets.redact(record) is record


def test_redact_walks_records_json_cannot_carry() -> None:
    secrets = secrets_of({"x-api-key": "custom-key-123"})
    record = {"model": "\ud800 custom-key-123", "usage": {"n": 2**70}, "raw": b"custom-key-123"}
    assert secrets.redact(record) == {
        "model": "\ud800 " + "*" * 14,
        "usage": {"n": 2**70},
        "raw": b"*" * 14,
    }


def test_mask_keeps_every_length_and_offset() -> None:
    secrets = secrets_of({"Authorization": f"Bearer {GROQ}"}, "/v1/x?key=query-secret-1")
    body = (
        b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
        b'data: {"error":{"message":"Incorrect API key provided: ' + GROQ.encode() + b'"}}\n\n'
        b"data: query-secret-1 query-secret-1\n\n"
    )
    masked = secrets.mask(body)
    assert len(masked) == len(body)
    assert GROQ.encode() not in masked and b"query-secret-1" not in masked
    assert masked.count(b"*") == len(GROQ) + 2 * len("query-secret-1")
    assert masked.replace(b"*", b"") == body.replace(GROQ.encode(), b"").replace(
        b"query-secret-1", b""
    )


def test_mask_finds_a_value_split_across_chunks_in_the_whole_body() -> None:
    # The capture masks the joined body at save time: a value cut by a chunk boundary is found.
    secrets = secrets_of({"x-api-key": GROQ})
    chunks = [b"data: " + GROQ[:10].encode(), GROQ[10:].encode() + b"\n\n"]
    masked = secrets.mask(b"".join(chunks))
    assert masked == b"data: " + b"*" * len(GROQ) + b"\n\n"


def test_mask_of_a_cut_body_masks_a_value_begun_at_its_end() -> None:
    secrets = secrets_of({"x-api-key": GROQ})
    cut = b"data: " + GROQ[:20].encode()
    assert secrets.mask(cut) == cut  # a complete body: only whole values
    assert secrets.mask(cut, cut=True) == b"data: " + b"*" * 20


@given(
    secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=8, max_size=40),
    pieces=st.lists(st.binary(max_size=30), max_size=8),
)
def test_mask_never_leaves_a_value_and_never_changes_a_length(
    secret: str, pieces: list[bytes]
) -> None:
    secrets = secrets_of({"x-api-key": secret})
    body = secret.encode().join(pieces)
    masked = secrets.mask(body)
    assert len(masked) == len(body)
    assert secret.encode() not in masked
    assert secrets.redact(body.decode("latin-1")).count(secret) == 0


def test_url_userinfo_is_redacted_wherever_it_is() -> None:
    text = "upstream https://user:pa55word@api.example.com/v1, see http://host/a@b"
    assert NO_SECRETS.redact({"upstream": text}) == {
        "upstream": "upstream https://***@api.example.com/v1, see http://host/a@b"
    }
    assert NO_SECRETS.redact_text("http://***@host/") == "http://***@host/"  # masked already


def test_with_body_adds_the_body_s_values() -> None:
    body = b'{"api_key": "body-secret-1"}'
    headers = {"x-api-key": "header-key-1"}
    early = secrets_of(headers)
    assert early.with_body(body) == secrets_of(headers, "/v1/x", body)
    assert early.with_body(b'{"model": "m"}') is early
    assert early.with_json_body({"API_KEY": "body-secret-2"}).values == (
        "body-secret-2",
        "header-key-1",
    )
    assert early.with_json_body(["not", "an", "object"]) is early


def test_a_target_of_many_encoded_delimiters_is_redacted_where_it_names_a_credential() -> None:
    # The shape that made the parameter pattern quadratic (a name running over encoded `?`).
    target = "/v1/x" + "%3F" * 2000 + "key%3DHOSTILE-SECRET" + "%26a" * 500
    redacted = NO_SECRETS.redact_target(target)
    assert "HOSTILE-SECRET" not in redacted and "key%3D[redacted]%26a" in redacted
    assert "HOSTILE-SECRET" in secrets_of({}, target).values


def test_a_cut_value_is_masked_from_its_longest_beginning() -> None:
    secrets = secrets_of({"x-api-key": "abcdefghabcdefgh-tail"})
    # "abcdefgh" starts the value twice: the longest beginning that ends the data wins.
    assert secrets.mask(b"data: abcdefghabcdefgh-ta", cut=True) == b"data: " + b"*" * 19
    assert secrets.mask(b"data: abcdefgh", cut=True) == b"data: " + b"*" * 8
    assert secrets.mask(b"data: abcdefg", cut=True) == b"data: abcdefg"  # 7: not a leak


def test_the_admin_token_is_compared_whole() -> None:
    assert token_matches("s3cret-token", "s3cret-token")
    for attempt in ("s3cret-toke", "s3cret-token!", "S3CRET-TOKEN", "", None, "caf\udce9"):
        assert not token_matches(attempt, "s3cret-token")
    assert not token_matches("", "")  # no token configured: nothing matches


@pytest.mark.parametrize(
    "name",
    [
        "secret",
        "Secret",
        "token",
        "access_token",
        "refresh_token",
        "signature",
        "sig",
        "password",
        "passwd",
        "api_key",
        "apikey",
        "client_secret",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
        "X-Goog-Signature",
        "private_key",
        "app.secret",
    ],
)
def test_query_parameters_named_like_secrets_are_redacted(name: str) -> None:
    target = f"/v1/x?alt=sse&{name}=QUERY-SECRET-1&b=1"
    secrets = secrets_of({}, target)
    assert "QUERY-SECRET-1" in secrets.values
    assert secrets.redact_target(target) == f"/v1/x?alt=sse&{name}={REDACTED}&b=1"
    assert Secrets.of_request({}, target)[1] == f"/v1/x?alt=sse&{name}={REDACTED}&b=1"


@pytest.mark.parametrize("name", ["signed", "design", "keys", "tokens_used", "session_like"])
def test_parameters_that_only_contain_a_secret_word_are_kept(name: str) -> None:
    target = f"/v1/x?{name}=visible-value"
    assert Secrets.of_request({}, target)[1] == target
