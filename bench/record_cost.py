"""What one finished request costs the proxy after its last byte: the verdict's dict, the
record (built, redacted, made JSON-safe), the JSON log line and the metrics, through the very
functions the shell calls (`record.build`, `sinks.deliver`), for three realistic requests.

`python -m bench.record_cost [--rounds 7 --iterations 2000]` prints the median microseconds
per request of each part and of the whole, over interleaved rounds (each round runs every part
of every case in turn, so a slow moment of the machine touches all of them alike).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import statistics
import time
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from yarl import URL

from sseproxy.config import Route
from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions
from sseproxy.core.pacing import Pacing
from sseproxy.core.request import RequestFacts as AskedFacts
from sseproxy.observe import log
from sseproxy.observe.metrics import Metrics
from sseproxy.observe.redact import Secrets
from sseproxy.shell import record as records
from sseproxy.shell import sinks, state

TARGET_US = 50.0
KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8t"  # a made-up key, as a client would send one


class NullStream(io.TextIOBase):
    """Where the log lines go: rendered in full, then dropped."""

    def write(self, s: str) -> int:
        return len(s)

    def isatty(self) -> bool:
        return False


class Delivered:
    """What `ClientDelivery.fields` adds to a record, without a socket."""

    def fields(self, broken: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"client_wait_ms": 0.412, "client_bytes": 2817}
        if broken:
            out["events_delivered"] = 9
            out["last_event_delivered"] = "content_block_delta"
        return out


def _sse(*events: tuple[str | None, Any]) -> bytes:
    out = []
    for name, payload in events:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        out.append((f"event: {name}\n" if name else "") + f"data: {data}\n\n")
    return "".join(out).encode()


def chat_body() -> bytes:
    base = {"id": "chatcmpl-9x8y7z", "object": "chat.completion.chunk", "model": "gpt-4o-mini"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> Any:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return (None, {**base, "choices": [choice], **extra})

    call = {"index": 0, "id": "call_abc123", "type": "function"}
    return _sse(
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": w}) for w in ("Let ", "me ", "check ", "the ", "weather.")),
        chunk({"tool_calls": [{**call, "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, "tool_calls"),
        (
            None,
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": 412,
                    "completion_tokens": 37,
                    "total_tokens": 449,
                    "prompt_tokens_details": {"cached_tokens": 128},
                    "completion_tokens_details": {"reasoning_tokens": 0},
                },
            },
        ),
        (None, "[DONE]"),
    )


def anthropic_body() -> bytes:
    message = {
        "id": "msg_01XyZ",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 88, "output_tokens": 1},
    }
    text = ("The ", "answer ", "is ", "forty")
    return (
        _sse(
            ("message_start", {"type": "message_start", "message": message}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            ),
            *(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": t},
                    },
                )
                for t in text
            ),
        )
        + b'event: content_block_delta\ndata: {"type": "content_blo'
    )  # cut mid-event


def error_body() -> bytes:
    error = {"type": "rate_limit_error", "code": "429", "message": "Rate limit reached."}
    return json.dumps({"error": error}).encode()


def exchange(
    name: str,
) -> tuple[state.RequestFacts, state.Progress]:
    """Facts and progress of one finished request, as the relay leaves them."""
    now = time.monotonic()
    chat = Route("openai", ("/v1/*",), "https://api.openai.com", URL("https://api.openai.com"))
    anth = Route("anthropic", ("/v1/*",), "https://api.anthropic.com", URL("https://x"))
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    body = b'{"model": "gpt-4o-mini", "stream": true, "messages": []}'
    if name == "chat_tool_call":
        route, dialect, status, data, ctype = chat, Dialect.OPENAI_CHAT, 200, chat_body(), "sse"
        asked = AskedFacts(model="gpt-4o-mini", stream=True, include_usage=True)
        end, whole = EndReason.END_OF_INPUT, True
    elif name == "anthropic_cut":
        route, dialect, status, data = anth, Dialect.ANTHROPIC_MESSAGES, 200, anthropic_body()
        ctype, asked = "sse", AskedFacts(model="claude-sonnet-4-5", stream=True)
        end, whole = EndReason.UPSTREAM_CLOSED, False
        headers = {"x-api-key": "sk-ant-api03-" + "Q" * 24, "anthropic-version": "2023-06-01"}
    else:
        route, dialect, status, data = chat, Dialect.OPENAI_CHAT, 429, error_body()
        ctype, asked = "json", AskedFacts(model="gpt-4o-mini", stream=True)
        end, whole = EndReason.END_OF_INPUT, True
    content_type = "text/event-stream" if ctype == "sse" else "application/json"
    path = "/v1/chat/completions" if route is chat else "/v1/messages"
    secrets = Secrets.from_request(headers, path, body)
    facts = state.RequestFacts(
        request_id=uuid.uuid4().hex,
        method="POST",
        path=secrets.redact_target(path),
        started_at=time.time(),
        start=now - 1.2,
        route=route,
        body=body,
        headers=headers,
        secrets=secrets,
        asked=asked,
    )
    progress = state.Progress(state.Timings(now - 1.2))
    progress.timings.headers = now - 0.9
    progress.status = status
    progress.content_type = content_type
    progress.upstream_request_id = "req_" + "7" * 24
    progress.stream = ctype == "sse"
    progress.tap = StreamTap(
        dialect, content_type=content_type, options=TapOptions(), request=asked
    )
    progress.pacing = Pacing(facts.start)
    progress.pacing.first_byte(now - 0.9)
    progress.delivery = Delivered()  # type: ignore[assignment]
    step = 0.8 / max(1, data.count(b"\n\n"))
    t = now - 0.9
    pieces = data.split(b"\n\n")
    for i, piece in enumerate(pieces):
        t += step
        deltas = progress.tap.feed(piece + b"\n\n" if i < len(pieces) - 1 else piece)
        progress.timings.chunk(t, t, deltas)
        progress.pacing.content(t, deltas)
    progress.end, progress.http_complete = end, whole
    return facts, progress


class NoInspector:
    keep_content = False

    def finished(self, request_id: str, record: dict[str, Any], text: str | None) -> None:
        pass


def state_with(metrics: Any) -> Any:
    """The parts of ProxyState that `sinks.deliver` reads, with the log and metrics real."""
    return SimpleNamespace(
        metrics=metrics,
        inspector=NoInspector(),
        tracing=None,
        captures=None,
        failed_sinks=set(),
    )


class NoMetrics:
    def observe(self, *args: Any) -> None:
        pass


def parts_of(name: str) -> dict[str, Callable[[], object]]:
    facts, progress = exchange(name)
    verdict, pacing = records.verdict_of(facts, progress)
    record = records.build(facts, progress, verdict, pacing)
    fields = dict(record)
    metrics = Metrics(
        models=("gpt-4o-mini", "claude-sonnet-4-5"), routes=("openai", "anthropic"), process=False
    )
    full = state_with(metrics)
    log_only = state_with(NoMetrics())
    status = progress.status

    def total() -> None:
        rec, rendered = records.build_rendered(facts, progress, verdict, pacing)
        sinks.deliver(full, facts, progress, verdict, rec, rendered)

    return {
        "verdict.to_dict": verdict.to_dict,
        "secrets.redact": lambda: facts.secrets.redact(fields),
        "json_ready": lambda: log.json_ready(fields),
        "record.build": lambda: records.build(facts, progress, verdict, pacing),
        "log line": lambda: sinks.deliver(log_only, facts, progress, verdict, record),
        "metrics.observe": lambda: metrics.observe(verdict, status, fields),
        "total": total,
    }


CASES = ("chat_tool_call", "anthropic_cut", "http_error")


def measure(rounds: int, iterations: int) -> dict[str, dict[str, float]]:
    log.configure("json", "info", NullStream(), cache=False)
    cases = {name: parts_of(name) for name in CASES}
    samples: dict[str, dict[str, list[float]]] = {
        c: {p: [] for p in parts} for c, parts in cases.items()
    }
    for _ in range(rounds):
        for case, parts in cases.items():
            for part, call in parts.items():
                gc.collect()
                started = time.perf_counter()
                for _ in range(iterations):
                    call()
                elapsed = time.perf_counter() - started
                samples[case][part].append(elapsed / iterations * 1e6)
    return {
        case: {part: statistics.median(values) for part, values in parts.items()}
        for case, parts in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    parser.add_argument("--iterations", type=int, default=2000, help="calls per part per round")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = measure(args.rounds, args.iterations)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    parts = list(next(iter(figures.values())))
    print(f"median µs per request, {args.rounds} interleaved rounds of {args.iterations} calls")
    print(f"{'part':<18}" + "".join(f"{c:>16}" for c in figures))
    for part in parts:
        print(f"{part:<18}" + "".join(f"{figures[c][part]:>16.2f}" for c in figures))
    worst = max(f["total"] for f in figures.values())
    verdict = "met" if worst <= TARGET_US else "missed"
    print(f"target: total ≤ {TARGET_US:.0f} µs per request: {verdict} (worst case {worst:.1f} µs)")


if __name__ == "__main__":
    main()
