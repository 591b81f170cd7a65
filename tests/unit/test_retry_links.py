"""Retries as agents make them (shell/ledger.py): a JSON body sent again in another key order
(Codex's `client_metadata`, serialised from a hash map), a streamed request sent again without
`stream` (Claude Code's fallback after a cut or an `overloaded_error`), a WebSocket turn sent
again over HTTP (Codex's fallback); each link says how it was made. Bodies from the agents'
shapes in tests/data/agent_headers/ (codex.json, claude-code.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from sseproxy.core import State
from sseproxy.shell.ledger import (
    MAX_MEANING_BODY_BYTES,
    MAX_TURN_ID_CHARS,
    BodyKeys,
    Ended,
    Ledger,
    LedgerLimits,
    body_keys,
)

AGENTS = Path(__file__).parent.parent / "data" / "agent_headers"
CODEX: dict[str, Any] = json.loads((AGENTS / "codex.json").read_text())["body"]
CLAUDE: dict[str, Any] = json.loads((AGENTS / "claude-code.json").read_text())["body"]


def ended(
    request_id: str,
    body: bytes,
    state: State = State.INTERRUPTED,
    path: str = "/v1/responses",
    keys: BodyKeys | None = None,
    websocket: bool = False,
) -> Ended:
    return Ended(
        request_id=request_id,
        started=0.0,
        method="GET" if websocket else "POST",
        path=path,
        headers={},
        body=body,
        route="openai",
        session_id=None,
        state=state,
        response_id=None,
        events=(),
        delivered=0,
        retry_ms=None,
        text=None,
        websocket=websocket,
        keys=keys,
    )


def reordered(obj: dict[str, Any]) -> dict[str, Any]:
    """Every object's keys in the reverse order, as a hash map may write them."""
    return {k: reordered(v) if isinstance(v, dict) else v for k, v in reversed(obj.items())}


def link(first: Ended, second: Ended) -> dict[str, Any] | None:
    ledger = Ledger(LedgerLimits())
    ledger.link(first, now=0.0)
    return ledger.link(second, now=1.0).retry


def test_codex_metadata_in_a_new_key_order_is_the_same_meaning() -> None:
    first = json.dumps(CODEX).encode()
    again = json.dumps(reordered(CODEX), indent=1).encode()  # other order, other spacing
    assert first != again
    retry = link(ended("a", first), ended("b", again))
    assert retry is not None and (retry["of"], retry["linked_by"]) == ("a", "same_meaning")


def test_the_same_bytes_are_the_same_body() -> None:
    body = json.dumps(CODEX).encode()
    retry = link(ended("a", body), ended("b", body))
    assert retry is not None and retry["linked_by"] == "same_body"


def test_another_value_is_no_retry_whatever_the_order() -> None:
    other = {**CODEX, "input": [*CODEX["input"], {"type": "message", "role": "user"}]}
    assert link(ended("a", json.dumps(CODEX).encode()), ended("b", orjson.dumps(other))) is None


def test_a_list_in_another_order_is_another_question() -> None:
    """Key order is ignored; list order (the conversation's) is not."""
    body = {"model": "m", "messages": [{"role": "user", "content": "1"}, {"content": "2"}]}
    swapped = {**body, "messages": body["messages"][::-1]}
    assert link(ended("a", orjson.dumps(body)), ended("b", orjson.dumps(swapped))) is None


@pytest.mark.parametrize("stream", [None, False])
def test_claude_code_sending_the_turn_again_without_stream_is_linked(stream: bool | None) -> None:
    again = {k: v for k, v in CLAUDE.items() if k != "stream"}
    if stream is not None:
        again["stream"] = stream
    first = ended("a", orjson.dumps(CLAUDE), State.FAILED, "/v1/messages")  # overloaded_error
    retry = link(first, ended("b", orjson.dumps(again), State.COMPLETED, "/v1/messages"))
    assert retry is not None and (retry["of"], retry["linked_by"]) == ("a", "without_stream")


def test_a_request_sent_with_stream_after_one_without_is_not_without_stream() -> None:
    """Only a streamed attempt retried unstreamed is that fallback."""
    plain = {k: v for k, v in CLAUDE.items() if k != "stream"}
    first = ended("a", orjson.dumps(plain), State.FAILED, "/v1/messages")
    assert link(first, ended("b", orjson.dumps(CLAUDE), path="/v1/messages")) is None


def test_a_websocket_turn_sent_again_over_http_is_the_websocket_fallback() -> None:
    message = orjson.dumps({"type": "response.create", **reordered(CODEX)})
    turn = body_keys("GET", "/v1/responses", message, websocket=True)
    first = ended("turn-1", b"", keys=turn, websocket=True)
    retry = link(first, ended("http-1", orjson.dumps(CODEX)))
    assert retry is not None and (retry["of"], retry["linked_by"]) == (
        "turn-1",
        "websocket_fallback",
    )


def test_a_websocket_turn_sent_again_on_a_new_connection_is_the_same_meaning() -> None:
    message = orjson.dumps({"type": "response.create", **CODEX})
    again = orjson.dumps({"type": "response.create", **reordered(CODEX)})
    keys = [body_keys("GET", "/v1/responses", m, websocket=True) for m in (message, again)]
    retry = link(
        ended("t1", b"", keys=keys[0], websocket=True),
        ended("t2", b"", keys=keys[1], websocket=True),
    )
    assert retry is not None and retry["linked_by"] == "same_meaning"


def test_an_http_request_is_not_linked_to_a_websocket_turn_of_another_target() -> None:
    turn = body_keys("GET", "/v1/responses", orjson.dumps(CODEX), websocket=True)
    first = ended("t1", b"", keys=turn, websocket=True)
    assert link(first, ended("h1", orjson.dumps(CODEX), path="/v2/responses")) is None


@pytest.mark.parametrize(
    "state", [State.INTERRUPTED, State.CANCELLED, State.FAILED, State.HTTP_ERROR]
)
def test_a_repeat_after_a_cut_or_a_failure_is_a_retry(state: State) -> None:
    body = orjson.dumps(CLAUDE)
    assert link(ended("a", body, state), ended("b", body)) is not None


@pytest.mark.parametrize("state", [State.COMPLETED, State.INCOMPLETE, State.UNCONFIRMED])
def test_a_repeat_after_an_answer_is_no_retry(state: State) -> None:
    body = orjson.dumps(CLAUDE)
    assert link(ended("a", body, state), ended("b", body)) is None


def padded(size: int, swapped: bool = False) -> bytes:
    """A JSON object of exactly `size` bytes; `swapped`: its two keys the other way round
    (the same meaning, other bytes, the same size)."""
    head, tail = (b'{"pad":"', b'","model":"m"}') if swapped else (b'{"model":"m","pad":"', b'"}')
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_a_body_at_the_meaning_bound_is_compared_by_meaning_and_one_byte_more_is_not() -> None:
    at, at_swapped = padded(MAX_MEANING_BODY_BYTES), padded(MAX_MEANING_BODY_BYTES, True)
    over, over_swapped = (padded(MAX_MEANING_BODY_BYTES + 1, s) for s in (False, True))
    assert len(at) == len(at_swapped) == MAX_MEANING_BODY_BYTES and at != at_swapped
    assert len(over) == MAX_MEANING_BODY_BYTES + 1
    keys_over = body_keys("POST", "/p", over)
    assert keys_over.exact is not None and (keys_over.meaning, keys_over.asked) == (None, None)
    retry = link(ended("a", at, path="/p"), ended("b", at_swapped, path="/p"))
    assert retry is not None and retry["linked_by"] == "same_meaning"
    # Beyond the bound, only the same bytes are a retry.
    assert link(ended("a", over, path="/p"), ended("b", over_swapped, path="/p")) is None
    retry = link(ended("a", over, path="/p"), ended("b", over, path="/p"))
    assert retry is not None and retry["linked_by"] == "same_body"


def test_a_body_too_deep_to_write_back_is_linked_by_its_bytes_only() -> None:
    deep = b'{"a":' * 300 + b"1" + b"}" * 300  # orjson writes at most 255 levels back
    keys = body_keys("POST", "/p", deep)
    assert keys.exact is not None
    assert link(ended("a", deep, path="/p"), ended("b", deep, path="/p")) is not None


def test_the_keys_of_one_request_cost_a_bounded_digest() -> None:
    """The ledger keeps digests, never bodies: each key is 24 hex characters (a 64-bit keyed
    hash and a CRC-32)."""
    keys = body_keys("POST", "/v1/responses", orjson.dumps(CODEX))
    digests = (keys.exact, keys.meaning, keys.asked)
    assert all(k is not None and len(k) == 24 for k in digests)
    assert keys.streamed and not keys.websocket


# Codex CLI 0.171.0's shapes, as tests/agents saw them (`error-codex-ws`): its WebSocket turn
# continues the warm-up response (`previous_response_id`, the new input only) with WebSocket
# keys in `client_metadata`; its HTTP fallback sends the whole conversation, the same
# `turn_id` in `client_metadata`.
TURN_ID = "01a23b0d-cc67-7723-a620-d396be3b64a3"
SESSION = "01a23b0d-cc40-74a1-a1ee-20ef78b24bba"
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
SYSTEM = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "s"}]}


def codex_ws_turn(turn_id: str = TURN_ID) -> bytes:
    metadata = {
        "session_id": SESSION,
        "x-codex-ws-stream-request-start-ms": "1796287089891",
        "turn_id": turn_id,
    }
    return orjson.dumps(
        {
            "type": "response.create",
            "model": "gpt-5-codex",
            "previous_response_id": "resp_agent1",
            "input": [USER],
            "stream": True,
            "client_metadata": metadata,
        }
    )


def codex_http_turn(turn_id: str = TURN_ID) -> bytes:
    metadata = {"turn_id": turn_id, "session_id": SESSION, "x-codex-turn-metadata": "{}"}
    body = {"model": "gpt-5-codex", "input": [SYSTEM, USER], "stream": True}
    return orjson.dumps({**body, "client_metadata": metadata})


def test_codex_fallback_with_the_whole_conversation_is_linked_by_its_turn() -> None:
    """The fallback is not the same request in another envelope: only the turn id says so."""
    turn = body_keys("GET", "/v1/responses", codex_ws_turn(), websocket=True)
    first = ended("turn-1", b"", State.FAILED, keys=turn, websocket=True)
    retry = link(first, ended("http-1", codex_http_turn()))
    assert retry is not None and (retry["of"], retry["linked_by"]) == (
        "turn-1",
        "websocket_fallback",
    )


def test_the_same_turn_sent_again_in_another_shape_is_the_same_turn() -> None:
    first = ended("a", codex_http_turn(), State.FAILED)
    again = orjson.loads(codex_http_turn())
    again["input"] = [USER]  # another shape of the same turn
    retry = link(first, ended("b", orjson.dumps(again)))
    assert retry is not None and retry["linked_by"] == "same_turn"


def test_another_turn_is_no_retry() -> None:
    turn = body_keys("GET", "/v1/responses", codex_ws_turn(), websocket=True)
    first = ended("turn-1", b"", State.FAILED, keys=turn, websocket=True)
    assert (
        link(first, ended("http-1", codex_http_turn("01a23b0d-0000-0000-0000-000000000000")))
        is None
    )


@pytest.mark.parametrize(
    ("chars", "linked"), [(MAX_TURN_ID_CHARS, True), (MAX_TURN_ID_CHARS + 1, False)]
)
def test_a_turn_id_is_taken_up_to_its_bound(chars: int, linked: bool) -> None:
    turn_id = "t" * chars
    first = ended("a", codex_http_turn(turn_id), State.FAILED)
    again = orjson.loads(codex_http_turn(turn_id))
    again["input"] = [USER]
    retry = link(first, ended("b", orjson.dumps(again)))
    assert (retry is not None) is linked
