"""The report's tables, as plain JSON-ready data: what `--json` prints, and what the text and
HTML renderings lay out. Sorted for people: most requests (or occurrences) first, then by key."""

from __future__ import annotations

import datetime
from typing import Any

from sseproxy.tools.report.bounded import Reservoir
from sseproxy.tools.report.summary import STATES, TIMELINE_STATES, StateCounts, Summary

# Of this JSON's shape. 2: drills (records with `injected`) are counted apart, in `drills`
# and `lines.drills`, and are in none of the other tables (`lines.records` excludes them).
REPORT_VERSION = 2


def _iso(moment: datetime.datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _row(key: dict[str, str], counts: StateCounts) -> dict[str, Any]:
    ordered = {s: counts.counts[s] for s in STATES if s in counts.counts}
    ordered.update(sorted((s, n) for s, n in counts.counts.items() if s not in ordered))
    return {
        **key,
        "requests": counts.requests,
        "failures": counts.failures,
        "failure_rate": _rate(counts.failures, counts.requests),
        "states": ordered,
    }


def _spread(reservoir: Reservoir) -> dict[str, Any]:
    return {
        "count": reservoir.count,
        "p50": _ms(reservoir.quantile(0.5)),
        "p95": _ms(reservoir.quantile(0.95)),
        "max": _ms(reservoir.maximum) if reservoir.count else None,
        "exact": reservoir.exact,
    }


def report(summary: Summary) -> dict[str, Any]:
    """The whole report as JSON-ready data."""

    def by(table: Any, name: str) -> list[dict[str, Any]]:
        rows = [_row({name: k}, v) for k, v in table.items()]
        return sorted(rows, key=lambda r: (-r["requests"], r[name]))

    model_routes = sorted(
        (_row({"model": m, "route": r}, v) for (m, r), v in summary.model_routes.items()),
        key=lambda r: (-r["requests"], r["model"], r["route"]),
    )
    clients = sorted(
        (_row({"client": c, "version": v}, n) for (c, v), n in summary.clients.items()),
        key=lambda r: (-r["requests"], r["client"], r["version"]),
    )
    runs = sorted(
        (
            {
                "run_id": k,
                "client": v.client,
                **_row({}, v),
                "retries": v.retries,
                "sessions": v.sessions,
                "first": _iso(v.first),
                "last": _iso(v.last),
            }
            for k, v in summary.runs.items()
        ),
        key=lambda r: (-r["requests"], r["run_id"]),
    )
    anomalies: list[dict[str, Any]] = [
        {"name": k, "occurrences": v.occurrences, "requests": v.requests}
        for k, v in summary.anomalies.items()
    ]
    anomalies.sort(key=lambda r: (-r["occurrences"], r["name"]))
    latency: list[dict[str, Any]] = [
        {"model": k, "ttft_ms": _spread(v.ttft), "duration_ms": _spread(v.duration)}
        for k, v in summary.latency.items()
    ]
    latency.sort(key=lambda r: (-r["duration_ms"]["count"], r["model"]))
    timeline = summary.timeline
    width = timeline.width
    return {
        "report_version": REPORT_VERSION,
        "lines": {
            "records": summary.records,
            "drills": summary.drills,
            "sessions": summary.sessions,
            "unparseable": summary.unparseable,
            "other_events": summary.other_events,
            "outside_window": summary.outside_window,
        },
        "window": {"since": _iso(summary.since), "until": _iso(summary.until)},
        "span": {"first": _iso(summary.first), "last": _iso(summary.last)},
        "schema_versions": dict(sorted((k, v.n) for k, v in summary.versions.items())),
        "states": {
            k: v.n for k, v in sorted(summary.states.items(), key=lambda kv: (-kv[1].n, kv[0]))
        },
        "by_route": by(summary.routes, "route"),
        "by_dialect": by(summary.dialects, "dialect"),
        "by_model": by(summary.models, "model"),
        "by_model_route": model_routes,
        "by_client": clients,
        "by_run": runs,
        "anomalies": anomalies,
        "cuts": sorted(
            ({"reason": k, "requests": v.n} for k, v in summary.cuts.items()),
            key=lambda r: (-r["requests"], r["reason"]),
        ),
        "latency": latency,
        "worst": [
            {
                "request_id": w.request_id,
                "timestamp": w.timestamp,
                "state": w.state,
                "model": w.model,
                "route": w.route,
                "status": w.status,
                "duration_ms": _ms(w.duration_ms),
                "what": w.what,
            }
            for w in summary.worst.best_first()
        ],
        "timeline": {
            "bucket_seconds": width,
            "states": list(TIMELINE_STATES),
            "buckets": [
                {
                    "start": _iso(
                        datetime.datetime.fromtimestamp(timeline.start(slot), datetime.UTC)
                    ),
                    "counts": counts,
                }
                for slot, counts in sorted(timeline.buckets.items())
            ],
        },
        "sessions": _sessions(summary),
        "drills": _drills(summary),
        "bounds": {
            "keys": summary.bounds.keys,
            "reservoir": summary.bounds.reservoir,
            "timeline": summary.bounds.timeline,
            "worst": summary.bounds.worst,
            "overflowed": {
                name: table.overflowed
                for name, table in (
                    ("states", summary.states),
                    ("routes", summary.routes),
                    ("dialects", summary.dialects),
                    ("models", summary.models),
                    ("model_routes", summary.model_routes),
                    ("anomalies", summary.anomalies),
                    ("cuts", summary.cuts),
                    ("latency", summary.latency),
                    ("session_closes", summary.session_closes),
                    ("session_anomalies", summary.session_anomalies),
                    ("drill_states", summary.drill_states),
                    ("drill_cuts", summary.drill_cuts),
                    ("drill_rules", summary.drill_rules),
                    ("clients", summary.clients),
                    ("runs", summary.runs),
                )
                if table.overflowed
            },
        },
    }


def _sessions(summary: Summary) -> dict[str, Any]:
    """How WebSocket sessions ended (their turns are in the request tables)."""
    closes: list[dict[str, Any]] = [
        {"route": r, "closed_by": by, "close_code": code, "sessions": v.n}
        for (r, by, code), v in summary.session_closes.items()
    ]
    closes.sort(key=lambda r: (-r["sessions"], r["route"], r["closed_by"], r["close_code"]))
    anomalies: list[dict[str, Any]] = [
        {"name": k, "occurrences": v.occurrences, "sessions": v.requests}
        for k, v in summary.session_anomalies.items()
    ]
    anomalies.sort(key=lambda r: (-r["occurrences"], r["name"]))
    return {
        "count": summary.sessions,
        "turns": summary.session_turns,
        "by_close": closes,
        "anomalies": anomalies,
    }


def _drills(summary: Summary) -> dict[str, Any]:
    """Requests with faults the proxy injected on purpose, apart from the real ones."""

    def counted(table: Any, name: str) -> list[dict[str, Any]]:
        rows = [{name: k, "requests": v.n} for k, v in table.items()]
        return sorted(rows, key=lambda r: (-r["requests"], r[name]))

    return {
        "requests": summary.drills,
        "states": {
            k: v.n
            for k, v in sorted(summary.drill_states.items(), key=lambda kv: (-kv[1].n, kv[0]))
        },
        "cuts": counted(summary.drill_cuts, "reason"),
        "faults": counted(summary.drill_rules, "fault"),
    }
