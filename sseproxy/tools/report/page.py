"""The report as one self-contained HTML page: the same tables, a timeline of states and the
TTFT distribution per model as inline SVG. No script, no external resource (its CSP forbids
both), every string from the log escaped: it opens offline, and a log cannot inject markup."""

from __future__ import annotations

import datetime
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


def _nice_step(top: float, ticks: int = 5) -> float:
    """A round step (1, 2 or 5 times a power of ten) that divides 0..top into at most `ticks`."""
    if top <= 0:
        return 1.0
    raw = top / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return float(factor * power)
    return float(10 * power)


def _count(n: float) -> str:
    return f"{n:g}"


def _clock(moment: datetime.datetime, span_s: float) -> str:
    """A tick's time: to the second within a day, with the date beyond."""
    if span_s < 86400:
        return moment.strftime("%H:%M:%S") if span_s < 600 else moment.strftime("%H:%M")
    return moment.strftime("%m-%d %H:%M")


def timeline_svg(data: dict[str, Any], width: int = 1100, height: int = 220) -> str:
    """Requests per state per time bucket, stacked, on a time axis (UTC) with a count axis."""
    buckets = data["timeline"]["buckets"]
    states = data["timeline"]["states"]
    if not buckets:
        return "<p>no timestamps</p>"
    seconds = data["timeline"]["bucket_seconds"]
    left, right, top, bottom = 56, 12, 16, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    starts = [datetime.datetime.fromisoformat(b["start"]) for b in buckets]
    first = starts[0]
    span = (starts[-1] - first).total_seconds() + float(seconds)
    tallest = max(sum(b["counts"]) for b in buckets) or 1
    step = _nice_step(tallest)
    y_top = max(step * math.ceil(tallest / step), step)

    def x(moment: datetime.datetime) -> float:
        return left + (moment - first).total_seconds() / span * plot_w

    def y(n: float) -> float:
        return top + plot_h - n / y_top * plot_h

    bar = max(seconds / span * plot_w - 1, 0.5)
    parts = []
    for i in range(int(y_top / step) + 1):  # the count axis: gridlines and values
        value = i * step
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.2f}" y2="{y(value):.2f}" '
            f'stroke="#e5e5e5"/><text x="{left - 6}" y="{y(value) + 4:.2f}" font-size="11" '
            f'text-anchor="end">{_count(value)}</text>'
        )
    for moment, bucket in zip(starts, buckets, strict=True):
        level = 0.0
        for state, n in zip(states, bucket["counts"], strict=True):
            if not n:
                continue
            parts.append(
                f'<rect x="{x(moment):.2f}" y="{y(level + n):.2f}" width="{bar:.2f}" '
                f'height="{y(level) - y(level + n):.2f}" fill="{COLORS[state]}">'
                f"<title>{e(bucket['start'])} {e(state)}: {n}</title></rect>"
            )
            level += n
        if len(buckets) <= 60 and bar >= 12:  # the bar's total above it, where it fits
            parts.append(
                f'<text x="{x(moment) + bar / 2:.2f}" y="{y(level) - 3:.2f}" font-size="10" '
                f'text-anchor="middle" class="value">{_count(level)}</text>'
            )
    ticks = 6
    for i in range(ticks + 1):  # the time axis
        moment = first + datetime.timedelta(seconds=span * i / ticks)
        tx = left + plot_w * i / ticks
        anchor = "start" if i == 0 else "end" if i == ticks else "middle"
        parts.append(
            f'<line x1="{tx:.2f}" x2="{tx:.2f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" '
            f'stroke="#444"/><text x="{tx:.2f}" y="{top + plot_h + 16}" font-size="11" '
            f'text-anchor="{anchor}">{e(_clock(moment, span))}</text>'
        )
    axes = (
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#444"/>'
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        'stroke="#444"/>'
        f'<text x="{left + plot_w / 2}" y="{height - 6}" font-size="12" text-anchor="middle">'
        f"time (UTC, {e(first.strftime('%Y-%m-%d'))}), one bar per {seconds} s</text>"
        f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" font-size="12" '
        f'text-anchor="middle">requests per {seconds} s</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="requests per state over time" class="chart">'
        f"{''.join(parts)}{axes}</svg>"
        f'<p class="lede">one bar per {seconds} s, at most {tallest} requests in one</p>'
    )


def ttft_svg(summary: Summary, models: list[str], width: int = 1100) -> str:
    """A histogram of each model's time to first token on one log-scaled axis (the reservoir's
    sample: every value while a model has at most `Bounds.reservoir` of them), each bar with
    its count, each row with its median (a dashed line)."""
    samples = {m: [v for v in summary.latency.rows[m].ttft.values if v > 0] for m in models}
    samples = {m: v for m, v in samples.items() if v}
    if not samples:
        return "<p>no time to first token in these records</p>"
    low = math.floor(math.log10(min(min(v) for v in samples.values())))
    high = math.ceil(math.log10(max(max(v) for v in samples.values())))
    high = max(high, low + 1)
    span = float(high - low)
    row, label, right = 56, 230, 36  # room for the last tick's value
    plot = width - label - right
    bin_w = plot / BINS
    parts = []
    for n, (model, values) in enumerate(samples.items()):
        counts = [0] * BINS
        for v in values:
            counts[min(int((math.log10(v) - low) / span * BINS), BINS - 1)] += 1
        peak = max(counts)
        y0 = n * row
        base = y0 + row - 6
        median = sorted(values)[len(values) // 2]
        parts.append(
            f'<text x="0" y="{y0 + row / 2:.2f}" font-size="12">{e(model[:32])}</text>'
            f'<text x="0" y="{y0 + row / 2 + 14:.2f}" font-size="10" fill="#666">'
            f"{len(values)} requests, p50 {e(_ms(median))}</text>"
            f'<line x1="{label}" x2="{label + plot}" y1="{base}" y2="{base}" stroke="#bbb"/>'
        )
        for b, c in enumerate(counts):
            if not c:
                continue
            h = c / peak * (row - 24)
            bx = label + b * bin_w
            parts.append(
                f'<rect x="{bx:.2f}" y="{base - h:.2f}" width="{bin_w - 1:.2f}" '
                f'height="{h:.2f}" fill="#3a7bd5"><title>{e(model)}: {c} requests in '
                f"{e(_ms(10 ** (low + b * span / BINS)))} .. "
                f"{e(_ms(10 ** (low + (b + 1) * span / BINS)))}</title></rect>"
                f'<text x="{bx + bin_w / 2:.2f}" y="{base - h - 2:.2f}" font-size="10" '
                f'text-anchor="middle" class="value">{c}</text>'
            )
        mx = label + (math.log10(median) - low) / span * plot
        parts.append(
            f'<line x1="{mx:.2f}" x2="{mx:.2f}" y1="{y0 + 4}" y2="{base}" stroke="#c0392b" '
            f'stroke-dasharray="3 2"><title>{e(model)}: median {e(_ms(median))}</title></line>'
        )
    total = len(samples) * row
    ticks = []
    for power in range(low, high + 1):
        for factor in (1, 2, 5):
            value = factor * 10.0**power
            if not 10.0**low <= value <= 10.0**high:
                continue
            tx = label + (math.log10(value) - low) / span * plot
            ticks.append(
                f'<line x1="{tx:.2f}" x2="{tx:.2f}" y1="{total}" '
                f'y2="{total + (5 if factor == 1 else 3)}" stroke="#444"/>'
                + (
                    f'<text x="{tx:.2f}" y="{total + 17}" font-size="11" '
                    f'text-anchor="middle">{_ms(value)}</text>'
                    if factor == 1 or span <= 2
                    else ""
                )
            )
    axis = (
        f'<line x1="{label}" x2="{label + plot}" y1="{total}" y2="{total}" stroke="#444"/>'
        f'<text x="{label + plot / 2}" y="{total + 36}" font-size="12" text-anchor="middle">'
        "time to first token (log scale); bar height: requests per bin, the number above it"
        "</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total + 44}" '
        f'role="img" aria-label="time to first token per model" class="chart">'
        f"{''.join(parts)}{''.join(ticks)}{axis}</svg>"
    )


def _drills(drills: dict[str, Any]) -> list[str]:
    """Requests with faults the proxy injected on purpose, apart from the real traffic."""
    if not drills["requests"]:
        return []
    return [
        "<h2>Drills</h2>",
        f'<p class="lede">{drills["requests"]} requests with faults the proxy injected on '
        "purpose (--inject, x-sseproxy-inject): their cuts and errors are the drills', so "
        "they are in none of the tables above.</p>",
        _table(["drill state", "requests"], [[k, n] for k, n in drills["states"].items()]),
        _table(["drill cut", "requests"], [[c["reason"], c["requests"]] for c in drills["cuts"]]),
        _table(["fault", "requests"], [[f["fault"], f["requests"]] for f in drills["faults"]]),
    ]


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
        *(
            [f"<p>and {lines['drills']} drills, counted apart (see Drills)</p>"]
            if lines["drills"]
            else []
        ),
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
        '<p class="lede">real cuts only: a drill\'s cut is under Drills</p>',
        _table(["reason", "requests"], [[c["reason"], c["requests"]] for c in data["cuts"]]),
        *_drills(data["drills"]),
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
