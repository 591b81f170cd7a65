"""The request body as the proxy reads it: its top-level members, only the few the facts and the
secrets need decoded (an agent's ~40 KB turn is never built into objects)."""

from __future__ import annotations

import pytest

from sseproxy.core.request import MAX_PARSED_BODY_BYTES, body_members, request_facts
from sseproxy.observe.redact import Secrets

# The shape of a Codex turn to the Responses API (model, instructions, an `input` list of
# messages, function calls and their outputs, `tools`), cut down.
CODEX_TURN = (
    b'{"model":"gpt-5-codex","instructions":"You are a coding agent.","input":['
    b'{"type":"message","role":"user","content":[{"type":"input_text","text":"fix \\u6d41"}]},'
    b'{"type":"function_call","name":"shell","arguments":"{\\"command\\":[\\"ls\\"]}",'
    b'"call_id":"call_1"},{"type":"function_call_output","call_id":"call_1","output":"a.rs"}],'
    b'"tools":[{"type":"function","name":"shell","parameters":{"type":"object",'
    b'"properties":{"stream":{"type":"boolean"},"model":{"type":"string"}}}}],'
    b'"tool_choice":"auto","parallel_tool_calls":false,"store":false,"stream":true,'
    b'"include":["reasoning.encrypted_content"],"prompt_cache_key":"k"}'
)


def test_an_agent_turn_gives_its_top_level_facts_only() -> None:
    f = request_facts("/v1/responses", "", CODEX_TURN)
    assert (f.model, f.stream, f.stream_framing, f.background) == ("gpt-5-codex", True, True, False)
    # `stream` and `model` nested in a tool's schema are not the request's
    nested = CODEX_TURN.replace(b'"stream":true,', b"")
    assert request_facts("/v1/responses", "", nested).stream is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "m", "input": [1, 2,}',  # malformed deep inside
        b'{"model": "m"} trailing',
        b'["model", "m"]',
        b'{"model": "m"',
        b"",
        b"model=m",
    ],
)
def test_a_body_that_is_not_one_json_object_gives_no_facts(body: bytes) -> None:
    assert body_members(body) is None
    assert request_facts("/v1/chat/completions", "", body).model is None


def test_a_member_that_cannot_be_decoded_alone_is_unknown_and_the_rest_known() -> None:
    # orjson refuses a number beyond a double; the other members still count
    f = request_facts("/v1/chat/completions", "", b'{"model": "m", "n": 1e999, "stream": true}')
    assert (f.model, f.choices, f.stream) == ("m", None, True)


def test_a_duplicated_member_counts_as_its_last_value() -> None:
    f = request_facts("/v1/chat/completions", "", b'{"stream": false, "stream": true}')
    assert f.stream is True  # as orjson and Python's json read it


def test_the_body_is_read_up_to_its_bound_and_not_one_byte_more() -> None:
    head = b'{"model": "m", "pad": "'
    at = head + b"x" * (MAX_PARSED_BODY_BYTES - len(head) - 2) + b'"}'
    assert len(at) == MAX_PARSED_BODY_BYTES
    assert request_facts("/v1/chat/completions", "", at).model == "m"
    over = head + b"x" * (MAX_PARSED_BODY_BYTES - len(head) - 1) + b'"}'
    assert request_facts("/v1/chat/completions", "", over).model is None


def test_only_top_level_credentials_of_the_body_are_secrets() -> None:
    body = CODEX_TURN[:-1] + b',"api_key":"sk-body-secret-0001","x":{"api_key":"nested-value-9"}}'
    secrets = Secrets.from_request({}, "/v1/responses", body)
    assert secrets.values == ("sk-body-secret-0001",)
    assert Secrets.from_request({}, "/v1/responses", b'{"API_KEY": 12345678901}').values == ()
