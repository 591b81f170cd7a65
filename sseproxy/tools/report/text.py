"""The report for a terminal: the counts first, then the tables, then the worst requests."""

from __future__ import annotations

import re
from typing import Any

from sseproxy.observe.log import clean_text

TOP = 15  # rows shown per table in the terminal; --json and --html have them all
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(value: object) -> str:
    """A value from the log as terminal text: control characters cannot move the cursor."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", clean_text(str(value)))


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f}s" if value >= 1000 else f"{value:.0f}ms"


def _table(head: list[str], rows: list[list[str]], right: int = 1) -> list[str]:
    """Columns padded to their widest cell; from column `right` on, numbers align right."""
    cells = [head, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    out = []
    for r in cells:
        out.append(
            "  ".join(
                c.ljust(w) if i < right else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    return out


def _states_table(
    title: str, name: str, rows: list[dict[str, Any]], states: list[str]
) -> list[str]:
    shown = rows[:TOP]
    body = [
        [one_line(r[name]), str(r["requests"]), f"{r['failure_rate']:.1%}"]
        + [str(r["states"].get(s, "")) for s in states]
        for r in shown
    ]
    more = [f"  ... {len(rows) - TOP} more"] if len(rows) > TOP else []
    return [title, *_table([name, "requests", "fail%", *states], body), *more, ""]


def _clients_table(rows: list[dict[str, Any]], states: list[str]) -> list[str]:
    named = [{**r, "client": f"{r['client']} {r['version']}"} for r in rows]
    return _states_table("By client", "client", named, states)


def _runs_table(rows: list[dict[str, Any]]) -> list[str]:
    """The agent runs the clients named (Codex's session-id, Claude Code's session header)."""
    if not rows:
        return []
    body = [
        [
            one_line(r["run_id"]),
            one_line(r["client"]),
            str(r["requests"]),
            f"{r['failure_rate']:.1%}",
            str(r["retries"]),
            str(r["sessions"]),
            one_line(r["first"] or "-")[:19],
        ]
        for r in rows[:TOP]
    ]
    head = ["run", "client", "requests", "fail%", "retries", "sessions", "first"]
    more = [f"  ... {len(rows) - TOP} more"] if len(rows) > TOP else []
    return ["By run", *_table(head, body, 2), *more, ""]


def render(data: dict[str, Any]) -> str:
    lines = data["lines"]
    span = data["span"]
    states = list(data["states"])
    total = lines["records"]
    out = [
        f"{total} requests"
        + (f" and {lines['drills']} drills (counted apart)" if lines["drills"] else "")
        + f", {span['first'] or '-'} .. {span['last'] or '-'}"
        f" ({lines['unparseable']} unparseable lines, {lines['other_events']} other events"
        + (f", {lines['outside_window']} outside the window" if lines["outside_window"] else "")
        + ")",
        "  ".join(f"{one_line(s)} {n} ({n / total:.1%})" for s, n in data["states"].items())
        if total
        else "no records",
        "",
    ]
    out += _states_table("By model", "model", data["by_model"], states)
    out += _states_table("By route", "route", data["by_route"], states)
    out += _states_table("By dialect", "dialect", data["by_dialect"], states)
    out += _clients_table(data["by_client"], states)
    out += _runs_table(data["by_run"])
    if data["latency"]:
        rows = [
            [
                one_line(r["model"]),
                str(r["ttft_ms"]["count"]),
                *(_ms(r["ttft_ms"][k]) for k in ("p50", "p95", "max")),
                *(_ms(r["duration_ms"][k]) for k in ("p50", "p95", "max")),
            ]
            for r in data["latency"][:TOP]
        ]
        head = ["model", "ttft n", "ttft p50", "p95", "max", "duration p50", "p95", "max"]
        out += ["Latency", *_table(head, rows), ""]
    if data["anomalies"]:
        rows = [
            [one_line(a["name"]), str(a["occurrences"]), str(a["requests"])]
            for a in data["anomalies"][:TOP]
        ]
        out += ["Anomalies", *_table(["anomaly", "count", "requests"], rows), ""]
    if data["cuts"]:
        rows = [[one_line(c["reason"]), str(c["requests"])] for c in data["cuts"][:TOP]]
        out += ["Cuts", *_table(["reason", "requests"], rows), ""]
    out += _drills(data["drills"])
    sessions = data["sessions"]
    if sessions["count"]:
        rows = [
            [
                one_line(r["route"]),
                one_line(r["closed_by"]),
                one_line(r["close_code"]),
                str(r["sessions"]),
            ]
            for r in sessions["by_close"][:TOP]
        ]
        out += [
            f"Sessions: {sessions['count']}, {sessions['turns']} turns"
            " (each turn is a request above)",
            *_table(["route", "closed by", "close code", "sessions"], rows, 3),
            "",
        ]
    if data["worst"]:
        rows = [
            [
                one_line(w["timestamp"])[:19],
                one_line(w["request_id"]),
                one_line(w["state"]),
                one_line(w["model"]),
                _ms(w["duration_ms"]),
                one_line(w["what"]),
            ]
            for w in data["worst"]
        ]
        out += [
            "Worst requests",
            *_table(["time", "request_id", "state", "model", "dur", "what"], rows, 6),
        ]
    overflowed = data["bounds"]["overflowed"]
    if overflowed:
        out += [
            "",
            f"more distinct values than {data['bounds']['keys']} in: "
            + ", ".join(overflowed)
            + " (the rest counted as (other))",
        ]
    return "\n".join(out).rstrip() + "\n"


def _drills(drills: dict[str, Any]) -> list[str]:
    """Requests with injected faults: their states, cuts and faults, apart from real ones."""
    if not drills["requests"]:
        return []
    states = "  ".join(f"{one_line(s)} {n}" for s, n in drills["states"].items())
    out = [f"Drills: {drills['requests']} (faults injected by the proxy; not in the tables above)"]
    out.append(f"  {states}")
    if drills["cuts"]:
        rows = [[one_line(c["reason"]), str(c["requests"])] for c in drills["cuts"][:TOP]]
        out += _table(["drill cut", "requests"], rows)
    rows = [[one_line(f["fault"]), str(f["requests"])] for f in drills["faults"][:TOP]]
    out += [*_table(["fault", "requests"], rows), ""]
    return out
