"""How fast `sseproxy report` reads a log, and how much memory it holds while doing so.

`python -m bench.report [--records 300000] [--models 50]` writes a JSON-lines log of that many
records (the README's real record, its fields varied: model, state, timings, anomalies, a
unique model name in one record of fifty, an unparseable line in one of a thousand), then
runs the report's whole pipeline (read, parse, accumulate, tables) over it in a child process
and prints records per second and the child's peak RSS. The RSS is the bound to watch: it must
not grow with `--records`.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STATES = ["completed"] * 12 + ["incomplete", "failed", "interrupted", "unconfirmed", "cancelled"]
ANOMALIES = ["partial_event_discarded", "missing_done", "usage_missing", "content_stall"]
# The README's interrupted Anthropic record, as the proxy wrote it.
TEMPLATE = {
    "timestamp": "2026-11-30T14:40:25.153907Z",
    "level": "error",
    "event": "request.finished",
    "schema_version": "1.0",
    "request_id": "b587e7ccbca24cadb86c22b1dbd7cb74",
    "upstream_request_id": None,
    "method": "POST",
    "path": "/v1/messages",
    "route": "anthropic",
    "upstream": "https://api.anthropic.com",
    "status": 200,
    "content_type": "text/event-stream",
    "model": "claude-sonnet-4-5",
    "response_model": "claude-sonnet-4-20250514",
    "stream": True,
    "ttfb_ms": 1.461,
    "ttft_ms": 42.565,
    "duration_ms": 83.984,
    "max_gap_ms": 20.568,
    "content_gap_ms": 41.419,
    "dialect": "anthropic-messages",
    "state": "interrupted",
    "finish_reason": None,
    "finish_category": None,
    "finish_reasons": None,
    "last_event": "ping",
    "last_event_id": None,
    "interruption": {"reason": "upstream_closed", "partial_event_bytes": 76},
    "http_complete": False,
    "error": None,
    "anomalies": {"partial_event_discarded": 1},
    "bytes": 809,
    "events": 4,
    "comments": 0,
    "text_chars": 11,
    "reasoning_chars": 0,
    "refusal_chars": 0,
    "tool_calls": [],
    "server_tool_calls": [],
    "usage": {
        "input_tokens": 17,
        "output_tokens": 1,
        "total_tokens": 18,
        "reasoning_tokens": None,
        "cached_tokens": 0,
    },
    "response_id": "msg_01DWdQ9Z3WPKooaaD2oVqLtX",
    "time_to_first_content_ms": 42.523,
    "content_burst_ms": 0.0,
    "output_tokens_per_s": None,
    "output_tokens_per_s_unmeasured": "single_delta",
    "client_wait_ms": 0.157,
    "client_bytes": 809,
}


def write_log(path: Path, records: int, models: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    start = 1_764_500_000.0
    with path.open("w") as out:
        for i in range(records):
            record = dict(TEMPLATE)
            state = rng.choice(STATES)
            model = f"model-{rng.randrange(models)}" if i % 50 else f"unique-{i}"
            moment = time.gmtime(start + i * 0.05)
            record.update(
                timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", moment) + f".{i % 1000:03d}000Z",
                request_id=f"{i:032x}",
                state=state,
                model=model,
                ttft_ms=round(rng.lognormvariate(6, 1), 3),
                duration_ms=round(rng.lognormvariate(8, 1), 3),
                anomalies={rng.choice(ANOMALIES): 1} if state != "completed" else {},
                interruption=TEMPLATE["interruption"] if state == "interrupted" else None,
            )
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
            if i % 1000 == 999:
                out.write("sseproxy: a line that is not JSON\n")
    return path.stat().st_size


CHILD = """
import resource, sys, time
from sseproxy.tools.report import Summary
from sseproxy.tools.report.lines import read_lines
from sseproxy.tools.report.tables import report
started = time.perf_counter()
data = report(Summary().feed(read_lines([sys.argv[1]])))
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(data["lines"]["records"], data["lines"]["unparseable"], elapsed, peak)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--models", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sseproxy.log"
        size = write_log(path, args.records, args.models)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)], check=True, capture_output=True, text=True
        ).stdout.split()
    records, unparseable, elapsed, peak_kib = int(out[0]), int(out[1]), float(out[2]), int(out[3])
    print(
        f"{records} records ({size / 1e6:.0f} MB, {unparseable} unparseable lines) in "
        f"{elapsed:.2f} s: {records / elapsed:,.0f} records/s, "
        f"{size / 1e6 / elapsed:.0f} MB/s; peak RSS {peak_kib / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
