"""`sseproxy report --html` in a real headless browser (Debian's chromium): the page renders
offline from a file, with its tables and both plots, and a log's markup stays text."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sseproxy.cli import main
from tests.e2e.test_inspector_browser import CHROMIUM, FLAGS

pytestmark = pytest.mark.e2e


def record(n: int, state: str, model: str) -> str:
    return json.dumps(
        {
            "timestamp": f"2026-12-01T10:{n % 60:02d}:00Z",
            "event": "request.finished",
            "request_id": f"r{n}",
            "state": state,
            "model": model,
            "route": "openai",
            "dialect": "openai-chat",
            "anomalies": {"missing_done": 1} if state != "completed" else {},
            "interruption": {"reason": "upstream_closed", "partial_event_bytes": 3}
            if state == "interrupted"
            else None,
            "ttft_ms": 100.0 + n,
            "duration_ms": 1000.0 + n,
        }
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
def test_the_report_page_renders_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert CHROMIUM is not None
    lines = [
        record(n, "interrupted" if n % 7 == 0 else "completed", f"m{n % 3}") for n in range(90)
    ]
    lines.append(record(90, "failed", "<img src=x onerror=alert(1)>"))
    log = tmp_path / "sseproxy.log"
    log.write_text("\n".join(lines) + "\n")
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), str(log)]) == 0
    capsys.readouterr()
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "sseproxy report: 91 requests" in dom
    assert dom.count("<svg") == 2
    assert dom.count("<table>") >= 7
    assert "<img" not in dom  # the hostile model name is text, not an element
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom
