"""Azure OpenAI's content-filter annotations inside Chat Completions streams.

Azure adds `prompt_filter_results` (a first chunk with `choices: []`) and per-choice
`content_filter_results` ({category: {filtered, severity | detected}}, or `error` when the
filter did not run), and in asynchronous filter mode annotation chunks without a `delta`
that may repeat the choice's `finish_reason` after it. None of this is content; a filter that
acted, or failed to run, is worth an anomaly (the finish reason `content_filter` already makes
the state `incomplete`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Every name `filter_anomalies` yields.
FILTER_ANOMALIES = ("content_filtered", "prompt_filtered", "content_filter_error")


def filter_anomalies(chunk: dict[str, Any]) -> Iterator[str]:
    """Anomaly names for the filter annotations of one Chat chunk (Azure only)."""
    prompts = chunk.get("prompt_filter_results", chunk.get("prompt_annotations"))
    if isinstance(prompts, list):
        for prompt in prompts:
            results = prompt.get("content_filter_results") if isinstance(prompt, dict) else None
            yield from _results(results, "prompt_filtered")
    choices = chunk.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict):
                yield from _results(choice.get("content_filter_results"), "content_filtered")


def _results(results: Any, filtered_name: str) -> Iterator[str]:
    if not isinstance(results, dict):
        return
    if isinstance(results.get("error"), dict):
        yield "content_filter_error"  # 200 OK, but the output went unfiltered
    if any(isinstance(v, dict) and v.get("filtered") is True for v in results.values()):
        yield filtered_name


def is_annotation(choice: dict[str, Any]) -> bool:
    """An asynchronous-filter annotation: filter results and no delta."""
    return "content_filter_results" in choice and "delta" not in choice
