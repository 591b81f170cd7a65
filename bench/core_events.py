"""What the pure core costs per event: `python -m bench.core_events [--rounds 9 --events 2000]`.

Each scenario is a stream built from a recorded body in tests/corpus: the events before its
first delta of one kind (untimed: they put the tap on its direct path), then that body's deltas
of the kind, repeated to `--events` (Responses sequence numbers renumbered so that they stay
consecutive). The "bench" streams are those `bench.upstream` sends to the proxy benchmarks.
Timed: `StreamTap.feed` with one event per chunk, and "bulk" with 16 events per chunk, as CPU
time of the process. Each scenario also runs with the dialect's fast path off
("full parse"), the JSON of every event parsed. Rounds are interleaved; medians reported.
"""

from __future__ import annotations

import argparse
import gc
import platform
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from bench import upstream
from sseproxy.core import Dialect, StreamTap
from sseproxy.core.dialects import anthropic_messages, openai_chat, openai_responses
from tests.corpus import file

BULK = 16
SEQUENCE = re.compile(rb'"sequence_number":(\d+)')
# The assembler classes whose `fast_path` switch the "full parse" rows turn off.
FAST_PATHS: dict[Dialect, type] = {
    Dialect.OPENAI_CHAT: openai_chat.OpenAIChatAssembler,
    Dialect.ANTHROPIC_MESSAGES: anthropic_messages.AnthropicMessagesAssembler,
    Dialect.OPENAI_RESPONSES: openai_responses.OpenAIResponsesAssembler,
}


@dataclass(frozen=True)
class Scenario:
    name: str
    dialect: Dialect
    corpus_file: str  # "" for a stream of `bench.upstream`, named by `is_delta`'s dialect
    is_delta: Callable[[bytes], bool]
    upstream: str = ""  # the `dialect` query value of `bench.upstream`


SCENARIOS = [
    Scenario(
        "chat text",
        Dialect.OPENAI_CHAT,
        "openai-chat/basic-text-no-usage.sse",
        lambda b: b'"content":"' in b and b'"finish_reason":null' in b,
    ),
    Scenario(
        "anthropic text",
        Dialect.ANTHROPIC_MESSAGES,
        "anthropic-messages/thinking-signature.sse",
        lambda b: b'"text_delta"' in b,
    ),
    Scenario(
        "anthropic thinking",
        Dialect.ANTHROPIC_MESSAGES,
        "anthropic-messages/thinking-signature.sse",
        lambda b: b'"thinking_delta"' in b,
    ),
    Scenario(
        "anthropic tool input",
        Dialect.ANTHROPIC_MESSAGES,
        "anthropic-messages/parallel-tool-use.sse",
        lambda b: b'"input_json_delta"' in b,
    ),
    Scenario(
        "responses text",
        Dialect.OPENAI_RESPONSES,
        "openai-responses/incomplete-max-output-tokens.sse",
        lambda b: b"event: response.output_text.delta\n" in b,
    ),
    Scenario(
        "responses reasoning",
        Dialect.OPENAI_RESPONSES,
        "openai-responses/reasoning-summary.sse",
        lambda b: b"event: response.reasoning_summary_text.delta\n" in b,
    ),
    Scenario(
        "responses tool args",
        Dialect.OPENAI_RESPONSES,
        "openai-responses/incomplete-mid-function-args.sse",
        lambda b: b"event: response.function_call_arguments.delta\n" in b,
    ),
    *(
        Scenario(f"bench {name}", dialect, "", lambda b: True, name)
        for name, dialect in (
            ("chat", Dialect.OPENAI_CHAT),
            ("anthropic", Dialect.ANTHROPIC_MESSAGES),
            ("responses", Dialect.OPENAI_RESPONSES),
        )
    ),
]


def build(scenario: Scenario, events: int) -> tuple[bytes, list[bytes]]:
    """(prelude, deltas): the body's events before its first delta, and `events` deltas."""
    if scenario.upstream:
        start, event, _ = upstream.DIALECTS[scenario.upstream]
        return start(), [event(i) for i in range(events)]
    blocks = [b + b"\n\n" for b in file(scenario.corpus_file).split(b"\n\n") if b.strip()]
    first = next(i for i, b in enumerate(blocks) if scenario.is_delta(b))
    prelude = b"".join(blocks[:first])
    pool = []  # the run of deltas that starts there: one content part
    for block in blocks[first:]:
        if scenario.is_delta(block):
            pool.append(block)
        elif b"ping" not in block:
            break
    numbers = [int(n) for n in SEQUENCE.findall(prelude)]
    seq = max(numbers, default=0)
    deltas = []
    for i in range(events):
        block = pool[i % len(pool)]
        if SEQUENCE.search(block):
            seq += 1
            block = SEQUENCE.sub(b'"sequence_number":%d' % seq, block)
        deltas.append(block)
    return prelude, deltas


def run(dialect: Dialect, prelude: bytes, chunks: list[bytes]) -> int:
    """CPU ns spent feeding `chunks` to a tap that has seen `prelude`."""
    tap = StreamTap(dialect)
    tap.feed(prelude)
    feed = tap.feed
    gc.collect()
    start = time.process_time_ns()
    for chunk in chunks:
        feed(chunk)
    spent = time.process_time_ns() - start
    anomalies = tap.anomalies + (tap.assembler.anomalies if tap.assembler else Counter())
    assert tap.events >= len(chunks) and not anomalies, anomalies
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--fast-only", action="store_true", help="skip the full-parse rows")
    parser.add_argument("--only", help="the streams whose name starts with this")
    args = parser.parse_args()
    scenarios = [s for s in SCENARIOS if s.name.startswith(args.only or "")]
    streams = {s.name: build(s, args.events) for s in scenarios}
    modes = [True] if args.fast_only else [True, False]
    single: dict[tuple[str, bool], list[float]] = {}
    bulk: dict[tuple[str, bool], list[float]] = {}
    for _ in range(args.rounds):
        for scenario in scenarios:
            prelude, deltas = streams[scenario.name]
            grouped = [b"".join(deltas[i : i + BULK]) for i in range(0, len(deltas), BULK)]
            for fast in modes:
                cls = FAST_PATHS[scenario.dialect]
                cls.fast_path = fast  # type: ignore[attr-defined]
                try:
                    one = run(scenario.dialect, prelude, deltas) / len(deltas)
                    many = run(scenario.dialect, prelude, grouped) / len(deltas)
                finally:
                    cls.fast_path = True  # type: ignore[attr-defined]
                single.setdefault((scenario.name, fast), []).append(one)
                bulk.setdefault((scenario.name, fast), []).append(many)
    print(
        f"# {platform.python_implementation()} {platform.python_version()} on "
        f"{platform.machine()}, {args.events} events per stream, median CPU ns of "
        f"{args.rounds} interleaved rounds"
    )
    print("| stream | path | ns per one-event feed | ns per event, 16 per feed |")
    print("|---|---|---:|---:|")
    for scenario in scenarios:
        for fast in modes:
            key = (scenario.name, fast)
            print(
                f"| {scenario.name} | {'fast' if fast else 'full parse'} "
                f"| {statistics.median(single[key]):,.0f} | {statistics.median(bulk[key]):,.0f} |"
            )


if __name__ == "__main__":
    main()
