"""The report as one self-contained HTML page: the same tables, a timeline of states and the
TTFT distribution per model as inline SVG. No script, no external resource (its CSP forbids
both), every string from the log escaped: it opens offline, and a log cannot inject markup."""

from __future__ import annotations

import html
import math
from typing import Any

from sseproxy.tools.report.summary import Summary
from sseproxy.tools.report.tables import report

COLORS = {
    "completed": "#3a9d5d",
    "incomplete": "#d4a72c",
    "unconfirmed": "#8c8c8c",
    "cancelled": "#6a8fc7",
    "failed": "#c0392b",
    "interrupted": "#e4572e",
    "http_error": "#8e44ad",
    "proxy_refused": "#b58ab8",
    "(other)": "#444444",
}
MODELS_PLOTTED = 8
BINS = 24
CSS = """
body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0}td,th{padding:.2em .6em;border-bottom:1px solid #ddd}
th{text-align:left;background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.lede{color:#555}.key span{display:inline-block;margin-right:1em}
.key i{display:inline-block;width:.8em;height:.8em;margin-right:.3em}
"""


def e(value: Any) -> str:
    """Any value from the log, as HTML text."""
    return html.escape(str(value), quote=True)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _table(head: list[str], rows: list[list[Any]], text_columns: int = 1) -> str:
    """The first `text_columns` are text, the rest numbers (aligned right)."""
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{e(c)}</td>' if i >= text_columns else f"<td>{e(c)}</td>"
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def _states_rows(rows: list[dict[str, Any]], name: str, states: list[str]) -> str:
    return _table(
        [name, "requests", "fail %", *states],
        [
            [r[name], r["requests"], f"{r['failure_rate']:.1%}"]
            + [r["states"].get(s, "") for s in states]
            for r in rows
        ],
    )


def _key(states: list[str]) -> str:
    return (
        '<p class="key">'
        + "".join(
            f'<span><i style="background:{COLORS.get(s, "#444")}"></i>{e(s)}</span>' for s in states
        )
        + "</p>"
    )


def timeline_svg(data: dict[str, Any], width: int = 1100, height: int = 180) -> str:
    """Requests per state per bucket, stacked."""
    buckets = data["timeline"]["buckets"]
    states = data["timeline"]["states"]
    if not buckets:
        return "<p>no timestamps</p>"
    tallest = max(sum(b["counts"]) for b in buckets) or 1
    bar = width / len(buckets)
    parts = []
    for i, bucket in enumerate(buckets):
        y = float(height)
        for state, n in zip(states, bucket["counts"], strict=True):
            if not n:
                continue
            h = n / tallest * (height - 10)
            y -= h
            parts.append(
                f'<rect x="{i * bar:.2f}" y="{y:.2f}" width="{max(bar - 1, 0.5):.2f}" '
                f'height="{h:.2f}" fill="{COLORS[state]}"><title>{e(bucket["start"])} '
                f"{e(state)}: {n}</title></rect>"
            )
    first, last = e(buckets[0]["start"]), e(buckets[-1]["start"])
    seconds = data["timeline"]["bucket_seconds"]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 20}" '
        f'role="img" aria-label="requests per state over time">{"".join(parts)}'
        f'<text x="0" y="{height + 15}" font-size="11">{first}</text>'
        f'<text x="{width}" y="{height + 15}" font-size="11" text-anchor="end">{last}</text>'
        f'</svg><p class="lede">one bar per {seconds} s, at most {tallest} requests</p>'
    )


def ttft_svg(summary: Summary, models: list[str], width: int = 1100) -> str:
    """A histogram of each model's time to first token on one log-scaled axis (the reservoir's
    sample: every value while a model has at most `Bounds.reservoir` of them)."""
    samples = {m: [v for v in summary.latency.rows[m].ttft.values if v > 0] for m in models}
    samples = {m: v for m, v in samples.items() if v}
    if not samples:
        return "<p>no time to first token in these records</p>"
    low = math.log10(min(min(v) for v in samples.values()))
    high = math.log10(max(max(v) for v in samples.values()))
    span = max(high - low, 1e-9)
    row, label = 46, 230
    plot = width - label
    parts = []
    for n, (model, values) in enumerate(samples.items()):
        counts = [0] * BINS
        for v in values:
            counts[min(int((math.log10(v) - low) / span * BINS), BINS - 1)] += 1
        top = max(counts)
        y0 = n * row
        parts.append(f'<text x="0" y="{y0 + row - 14}" font-size="12">{e(model[:32])}</text>')
        for b, c in enumerate(counts):
            if c:
                h = c / top * (row - 12)
                parts.append(
                    f'<rect x="{label + b * plot / BINS:.2f}" y="{y0 + row - 8 - h:.2f}" '
                    f'width="{plot / BINS - 1:.2f}" height="{h:.2f}" fill="#3a7bd5">'
                    f"<title>{e(model)}: {c}</title></rect>"
                )
    total = len(samples) * row
    ticks = "".join(
        f'<text x="{label + (math.log10(t) - low) / span * plot:.2f}" y="{total + 14}" '
        f'font-size="11" text-anchor="middle">{_ms(t)}</text>'
        for t in (1, 10, 100, 1000, 10000, 100000)
        if low <= math.log10(t) <= high
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total + 20}" '
        f'role="img" aria-label="time to first token per model">{"".join(parts)}{ticks}</svg>'
    )


def _sessions(sessions: dict[str, Any]) -> list[str]:
    """WebSocket sessions by how they closed, when the log has any."""
    if not sessions["count"]:
        return []
    return [
        "<h2>Sessions</h2>",
        f"<p>{sessions['count']} sessions, {sessions['turns']} turns "
        "(each turn is counted as a request above)</p>",
        _table(
            ["route", "closed by", "close code", "sessions"],
            [
                [r["route"], r["closed_by"], r["close_code"], r["sessions"]]
                for r in sessions["by_close"]
            ],
            text_columns=3,
        ),
        _table(
            ["session anomaly", "count", "sessions"],
            [[a["name"], a["occurrences"], a["sessions"]] for a in sessions["anomalies"]],
        ),
    ]


def render(summary: Summary) -> str:
    data = report(summary)
    lines, span = data["lines"], data["span"]
    states = list(data["states"])
    total = lines["records"]
    states_line = ", ".join(f"{e(s)} {n} ({n / total:.1%})" for s, n in data["states"].items())
    latency = _table(
        ["model", "ttft n", "ttft p50", "p95", "max", "duration p50", "p95", "max", "exact"],
        [
            [
                r["model"],
                r["ttft_ms"]["count"],
                *(_ms(r["ttft_ms"][k]) for k in ("p50", "p95", "max")),
                *(_ms(r["duration_ms"][k]) for k in ("p50", "p95", "max")),
                "yes" if r["ttft_ms"]["exact"] and r["duration_ms"]["exact"] else "sampled",
            ]
            for r in data["latency"]
        ],
    )
    plotted = [r["model"] for r in data["latency"][:MODELS_PLOTTED]]
    sections = [
        f"<h1>sseproxy report: {total} requests</h1>",
        f'<p class="lede">{e(span["first"] or "-")} .. {e(span["last"] or "-")}; '
        f"{lines['unparseable']} unparseable lines, {lines['other_events']} other events, "
        f"{lines['outside_window']} outside the window</p>",
        f"<p>{states_line}</p>",
        "<h2>States over time</h2>",
        _key(data["timeline"]["states"]),
        timeline_svg(data),
        "<h2>Time to first token per model</h2>",
        ttft_svg(summary, plotted),
        "<h2>By model</h2>",
        _states_rows(data["by_model"], "model", states),
        "<h2>By route</h2>",
        _states_rows(data["by_route"], "route", states),
        "<h2>By dialect</h2>",
        _states_rows(data["by_dialect"], "dialect", states),
        "<h2>By client</h2>",
        _states_rows(
            [{**r, "client": f"{r['client']} {r['version']}"} for r in data["by_client"]],
            "client",
            states,
        ),
        "<h2>By run</h2>",
        _table(
            ["run", "client", "requests", "failure rate", "retries", "sessions", "first", "last"],
            [
                [
                    r["run_id"],
                    r["client"],
                    r["requests"],
                    f"{r['failure_rate']:.1%}",
                    r["retries"],
                    r["sessions"],
                    r["first"] or "-",
                    r["last"] or "-",
                ]
                for r in data["by_run"]
            ],
            text_columns=2,
        ),
        "<h2>Latency per model</h2>",
        latency,
        "<h2>Anomalies</h2>",
        _table(
            ["anomaly", "count", "requests"],
            [[a["name"], a["occurrences"], a["requests"]] for a in data["anomalies"]],
        ),
        "<h2>Cuts</h2>",
        _table(["reason", "requests"], [[c["reason"], c["requests"]] for c in data["cuts"]]),
        *_sessions(data["sessions"]),
        "<h2>Worst requests</h2>",
        _table(
            ["time", "request_id", "state", "model", "route", "what", "status", "duration"],
            [
                [
                    w["timestamp"],
                    w["request_id"],
                    w["state"],
                    w["model"],
                    w["route"],
                    w["what"],
                    w["status"] if w["status"] is not None else "-",
                    _ms(w["duration_ms"]),
                ]
                for w in data["worst"]
            ],
            text_columns=6,
        ),
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>sseproxy report</title><style>{CSS}</style></head><body>"
        + "\n".join(sections)
        + "</body></html>\n"
    )
