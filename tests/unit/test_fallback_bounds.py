"""The peer-controlled values the 2026 additions read, each at its bound and one beyond:
Anthropic's fallback model ids and `usage.iterations` entries (shapes from anthropic-sdk-python
2.16 `types/beta/beta_fallback_block.py`, `beta_fallback_message_iteration_usage.py`), and an
MCP request's method name and version."""

from __future__ import annotations

import json
from typing import Any

from sseproxy.core import Dialect
from sseproxy.core.dialects.anthropic_messages import MAX_ITERATIONS, MAX_MODEL_CHARS
from sseproxy.core.mcp_request import MAX_METHOD_CHARS
from sseproxy.core.request import request_facts
from tests.streams import sse, verdict_of


def turn(block_to: str | None, iterations: list[dict[str, Any]] | None) -> Any:
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {"type": "message_start", "message": {"id": "m", "model": "a", "usage": {}}},
        )
    ]
    if block_to is not None:
        block = {"type": "fallback", "from": {"model": "a"}, "to": {"model": block_to}}
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ]
    usage: dict[str, Any] = {"output_tokens": 1}
    if iterations is not None:
        usage["iterations"] = iterations
    events += [
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return verdict_of(sse(*events), Dialect.ANTHROPIC_MESSAGES)


def served_by(model: str) -> dict[str, Any]:
    return {"type": "fallback_message", "model": model, "input_tokens": 1, "output_tokens": 1}


def test_no_fallback_no_record_of_one() -> None:
    assert turn(None, [{"type": "message", "model": "a"}]).fallback is None


def test_a_model_id_at_its_bound_and_one_beyond() -> None:
    at, beyond = "m" * MAX_MODEL_CHARS, "m" * (MAX_MODEL_CHARS + 1)
    assert turn(at, None).fallback.text_model == at
    v = turn(beyond, None)
    assert (v.fallback.hops, v.fallback.text_model) == (1, None)
    assert turn(None, [served_by(beyond)]).fallback is None


def test_the_iterations_read_stop_at_their_bound() -> None:
    filler = [{"type": "message", "model": "a"}]
    last_read = filler * (MAX_ITERATIONS - 1) + [served_by("b")]
    assert turn(None, last_read).fallback.text_model == "b"
    unread = filler * MAX_ITERATIONS + [served_by("b")]
    assert turn(None, unread).fallback is None


def test_the_served_model_wins_over_the_blocks_to() -> None:
    v = turn("b", [served_by("c")])
    assert (v.fallback.hops, v.fallback.text_model) == (1, "c")


def test_a_method_name_at_its_bound_and_one_beyond() -> None:
    def method(name: str) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": name, "params": {}}
        return request_facts("/mcp", "", json.dumps(body).encode())

    assert method("m" * MAX_METHOD_CHARS).rpc_method == "m" * MAX_METHOD_CHARS
    beyond = method("m" * (MAX_METHOD_CHARS + 1))
    assert beyond.rpc_method is None and beyond.mcp_call is None
