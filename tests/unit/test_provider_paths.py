"""Azure OpenAI and Vertex AI: their paths reach the right dialect, Azure's content-filter
annotations are read (not mistaken for content or for repeated finish reasons), and the
default config carries the routes docs/providers.md names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sseproxy.config import load
from sseproxy.core import Dialect
from sseproxy.core.dialects import detect
from tests.corpus import file as corpus
from tests.streams import sse, verdict_of


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        (
            "/azure/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            Dialect.OPENAI_CHAT,
        ),
        (
            "/openai/deployments/gpt-4o/responses?api-version=2025-04-01-preview",
            Dialect.OPENAI_RESPONSES,
        ),
        ("/openai/v1/chat/completions", Dialect.OPENAI_CHAT),
        ("/openai/v1/responses", Dialect.OPENAI_RESPONSES),
        (
            "/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            Dialect.GEMINI,
        ),
        (
            "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict",
            Dialect.ANTHROPIC_MESSAGES,
        ),
        ("/model/anthropic.claude-3-haiku-20240307-v1:0/converse-stream", Dialect.BEDROCK_CONVERSE),
        (
            "/model/us.meta.llama3-3-70b-instruct-v1:0/invoke-with-response-stream",
            Dialect.BEDROCK_INVOKE,
        ),
        ("/v2/chat", Dialect.COHERE_CHAT),
        ("/v1beta/interactions", Dialect.GEMINI_INTERACTIONS),
        ("/v1/interactions/v1_abc?stream=true&last_event_id=e3", Dialect.GEMINI_INTERACTIONS),
        ("/v1/message:stream", Dialect.A2A),
    ],
)
def test_provider_paths_are_detected(path: str, dialect: Dialect) -> None:
    assert detect("POST", path) is dialect


@pytest.mark.parametrize(
    ("path", "route", "target"),
    [
        (
            "/bedrock/us-east-1/model/m/converse-stream",
            "bedrock",
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream",
        ),
        ("/cohere/v2/chat", "cohere", "https://api.cohere.com/v2/chat"),
        # google-genai's interactions client on a custom base_url (it says /v1, not /v1beta)
        (
            "/v1/interactions",
            "gemini",
            "https://generativelanguage.googleapis.com/v1/interactions",
        ),
        (
            "/v1/interactions/v1_abc",
            "gemini",
            "https://generativelanguage.googleapis.com/v1/interactions/v1_abc",
        ),
        ("/together/chat/completions", "together", "https://api.together.xyz/v1/chat/completions"),
        (
            "/fireworks/chat/completions",
            "fireworks",
            "https://api.fireworks.ai/inference/v1/chat/completions",
        ),
        (
            "/deepinfra/chat/completions",
            "deepinfra",
            "https://api.deepinfra.com/v1/openai/chat/completions",
        ),
        ("/cerebras/chat/completions", "cerebras", "https://api.cerebras.ai/v1/chat/completions"),
        (
            "/perplexity/chat/completions",
            "perplexity",
            "https://api.perplexity.ai/chat/completions",
        ),
    ],
)
def test_new_default_routes(path: str, route: str, target: str) -> None:
    r = load().route_for(path)
    assert r is not None and r.name == route and str(r.target(path)) == target


def test_azure_and_vertex_routes_ship_commented_out() -> None:
    names = {r.name for r in load().routes}
    assert "azure" not in names and "vertex" not in names  # hosts are per user
    assert load().route_for("/azure/openai/deployments/d/chat/completions") is None


def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": choices,
        **extra,
    }


SAFE = {
    c: {"filtered": False, "severity": "safe"} for c in ("hate", "self_harm", "sexual", "violence")
}
PROMPT = {
    "id": "",
    "object": "",
    "model": "",
    "created": 0,
    "choices": [],
    "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": SAFE}],
}


def text(piece: str) -> dict[str, Any]:
    return chunk(
        [
            {
                "index": 0,
                "delta": {"content": piece},
                "finish_reason": None,
                "content_filter_results": SAFE,
            }
        ]
    )


def annotation(finish: str | None, results: dict[str, Any]) -> dict[str, Any]:
    choice = {
        "index": 0,
        "finish_reason": finish,
        "content_filter_results": results,
        "content_filter_offsets": {"check_offset": 0, "start_offset": 0, "end_offset": 11},
    }
    return {**chunk([choice]), "id": ""}


def test_recorded_azure_stream_has_no_anomaly() -> None:
    v = verdict_of(corpus("openai-chat/azure-prompt-filter-results.sse"), Dialect.OPENAI_CHAT)
    assert (v.state, v.anomalies) == ("completed", {})


def test_async_filter_annotation_repeating_the_finish_is_not_an_anomaly() -> None:
    stop = chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    data = sse(PROMPT, text("Hello"), text(" world"), stop, annotation("stop", SAFE), "[DONE]")
    v = verdict_of(data, Dialect.OPENAI_CHAT)
    assert (v.state, v.finish_reason, v.text_chars, v.anomalies) == ("completed", "stop", 11, {})


def test_async_filter_violation_is_incomplete_content_filter() -> None:
    protected = {**SAFE, "protected_material_text": {"filtered": True, "detected": True}}
    data = sse(PROMPT, text("Hello"), annotation("content_filter", protected), "[DONE]")
    v = verdict_of(data, Dialect.OPENAI_CHAT)
    assert (v.state, v.finish_category) == ("incomplete", "content_filter")
    assert v.anomalies == {"content_filtered": 1}


def test_filter_that_did_not_run_is_counted() -> None:
    error = {"error": {"code": "content_filter_error", "message": "The contents are not filtered"}}
    stop = chunk(
        [{"index": 0, "delta": {}, "finish_reason": "stop", "content_filter_results": error}]
    )
    v = verdict_of(sse(text("Hi"), stop, "[DONE]"), Dialect.OPENAI_CHAT)
    assert (v.state, v.anomalies) == ("completed", {"content_filter_error": 1})


def test_filtered_prompt_annotation_is_counted() -> None:
    flagged = json.loads(json.dumps(PROMPT))
    flagged["prompt_filter_results"][0]["content_filter_results"]["jailbreak"] = {
        "filtered": True,
        "detected": True,
    }
    stop = chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    v = verdict_of(sse(flagged, text("Hi"), stop, "[DONE]"), Dialect.OPENAI_CHAT)
    assert v.anomalies == {"prompt_filtered": 1}


@pytest.mark.parametrize(
    ("path", "model"),
    [
        (
            "/model/anthropic.claude-3-haiku-20240307-v1:0/converse-stream",
            "anthropic.claude-3-haiku-20240307-v1:0",
        ),
        (
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
            "anthropic.claude-3-haiku-20240307-v1:0",
        ),
        (
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.meta.llama3/invoke-with-response-stream",
            "arn:aws:bedrock:us-east-1:123:inference-profile/us.meta.llama3",
        ),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini-2.5-flash"),
    ],
)
def test_the_model_named_in_the_path(path: str, model: str) -> None:
    from sseproxy.core.request import request_facts

    assert request_facts(path, "", b"").model == model
