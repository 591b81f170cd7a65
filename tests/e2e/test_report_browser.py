"""`sseproxy report --html` in a real headless browser (Debian's chromium): the page renders
offline from a file, with its tables and both plots, and a log's markup stays text."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sseproxy.cli import main
from tests.e2e.test_inspector_browser import ARTIFACTS, CHROMIUM, FLAGS

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


DIALECTS = {"gpt": "openai-chat", "claude": "anthropic-messages", "gemini": "gemini"}


def hour_of_traffic() -> list[str]:
    """An hour of records as a proxy in front of three models writes them: mostly completed,
    some length-limited, a few cuts and errors, and a drill every ten minutes."""
    lines = []
    for n in range(240):
        minute, second = divmod(n * 15, 60)
        model = ("gpt-4.1-mini", "claude-sonnet-4", "gemini-2.5-flash")[n % 3]
        state, interruption, error, injected = "completed", None, None, None
        if n % 41 == 7:
            state, interruption = "interrupted", {"reason": "upstream_closed"}
        elif n % 53 == 11:
            state, error = "failed", {"type": "overloaded_error", "message": "Overloaded"}
        elif n % 17 == 5:
            state = "incomplete"
        if n % 40 == 20:
            state, interruption, injected = (
                "interrupted",
                {"reason": "upstream_closed"},
                ["cut-after=3"],
            )
        ttft = (180, 420, 650)[n % 3] * (1 + (n * 37 % 100) / 100)
        lines.append(
            json.dumps(
                {
                    "timestamp": f"2026-12-01T10:{minute:02d}:{second:02d}Z",
                    "event": "request.finished",
                    "request_id": f"r{n}",
                    "state": state,
                    "model": model,
                    "route": model.split("-")[0],
                    "dialect": DIALECTS[model.split("-")[0]],
                    "status": 200,
                    "finish_reason": "length" if state == "incomplete" else "stop",
                    "anomalies": {},
                    "interruption": interruption,
                    "error": error,
                    "injected": injected,
                    "ttft_ms": round(ttft, 1),
                    "duration_ms": round(ttft * 6, 1),
                }
            )
        )
    return lines


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
def test_the_report_page_has_charts_with_axes_and_drills_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Saves artifacts/report.png (docs/images/ holds a copy)."""
    assert CHROMIUM is not None
    log = tmp_path / "sseproxy.log"
    log.write_text("\n".join(hour_of_traffic()) + "\n")
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), str(log)]) == 0
    capsys.readouterr()
    flags = [f for f in FLAGS if not f.startswith("--window-size")]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--window-size=1400,900", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "sseproxy report: 234 requests" in dom and "and 6 drills, counted apart" in dom
    assert "<h2>Drills</h2>" in dom
    assert "requests per 15 s" in dom or "requests per " in dom
    assert "time (UTC, 2026-12-01)" in dom and ">10:30<" in dom
    assert "time to first token (log scale)" in dom and ">100 ms<" in dom
    assert dom.count('class="value"') > 20  # the values written on the bars
    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, *flags, "--window-size=1400,1950", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=60,
        check=True,
    )
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report.png").write_bytes(png)
