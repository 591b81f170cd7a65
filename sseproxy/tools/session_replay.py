"""`sseproxy replay X.json` of a WebSocket session capture: its messages fed, in order, through
the same judge the proxy uses (`core/sessions/`), then the recorded ending; prints
one line per turn and one for the session, and says whether the recorded states came again."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, TextIO

import orjson

from sseproxy.capture.format import TRUNCATED_REASON, UNFINISHED_REASON, unfinished
from sseproxy.capture.sessions import SessionFile, line_data, with_audio
from sseproxy.core import EndReason
from sseproxy.core.sessions import (
    SESSION_SPECS,
    SessionSpec,
    TurnJudge,
    TurnResult,
    parse_message,
    session_spec,
)
from sseproxy.tools.replay import EXIT_COMPLETED, EXIT_NOT_COMPLETED, EXIT_PARTIAL

# Exit statuses, as for an HTTP capture: 0 the recorded turn states came again, 1 they did not,
# 3 the capture holds only the session's first messages (2: a usage error, from the command).
EXIT_REPRODUCED = EXIT_COMPLETED
EXIT_DIFFERENT = EXIT_NOT_COMPLETED


def spec_of(dialect: Any, path: str) -> SessionSpec:
    """The recorded dialect's spec (the path's, for a capture that names none we know)."""
    for spec in SESSION_SPECS:
        if spec.dialect == dialect:
            return spec
    return session_spec(path)


def _feed(judge: TurnJudge, line: dict[str, Any]) -> list[TurnResult]:
    if line.get("kind") not in ("text", "binary"):
        return []
    data = line_data(line)
    if line.get("dir") == "client":
        # without capture_request_bodies only the message's name was kept: it is what the
        # judges read of a client message (`response.create`)
        name = line.get("name")
        if data is not None:
            obj = parse_message(data)
        else:
            obj = {"type": name} if isinstance(name, str) else None
        return judge.client(obj).ended
    if data is None:
        return []
    obj = parse_message(data)
    sizes = line.get("audio_bytes")
    if isinstance(sizes, list):
        obj = with_audio(obj, [s for s in sizes if isinstance(s, int)])
    size = line.get("size")
    if isinstance(size, int) and size > len(data):  # audio taken out: its bytes still count
        data += b" " * (size - len(data))
    return judge.upstream(obj, data).ended


def _recorded_end(sidecar: dict[str, Any]) -> EndReason:
    try:
        return EndReason(str(sidecar.get("end")))
    except ValueError:
        return EndReason.END_OF_INPUT


def replay_session(file: SessionFile, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Print each turn's verdict and the session's; the exit status says whether the
    recorded states were reproduced."""
    sidecar, session = file.sidecar, file.session
    spec = spec_of(sidecar.get("dialect"), str(sidecar.get("path") or ""))
    judge = spec.judge(None)
    results: list[TurnResult] = []
    for line in file.lines:
        results += _feed(judge, line)
    cut = unfinished(sidecar)  # the proxy stopped before the session ended
    truncated = sidecar.get("truncated") is True or cut
    code = session.get("close_code")
    reason = session.get("close_reason") or ""
    results += judge.close(
        EndReason.END_OF_INPUT if truncated else _recorded_end(sidecar),
        code if isinstance(code, int) else None,
        reason if isinstance(reason, str) else "",
    )
    for result in results:
        turn = {
            "turn": result.number,
            **result.verdict.to_dict(),
            "dialect": str(spec.dialect),
            "status": result.status or 101,
            "audio_bytes": result.audio_bytes,
            "audio_ms": result.audio_ms,
        }
        out.write(orjson.dumps(turn).decode() + "\n")
    states = [str(r.verdict.state) for r in results]
    recorded = _recorded_states(sidecar, session)
    # in turn order when the sidecar kept every turn record, else as counts
    ordered = not sidecar.get("turn_records_dropped")
    reproduced = states == recorded if ordered else sorted(states) == recorded
    summary: dict[str, Any] = {
        "session": {
            "dialect": str(spec.dialect),
            "turns": judge.turns,
            "states": dict(sorted(Counter(states).items())),
            "anomalies": dict(sorted((+judge.anomalies).items())),
            "errors": judge.errors,
            "close_code": code,
            "close_reason": reason or None,
            "closed_by": session.get("closed_by"),
            "recorded_states": recorded,
            "reproduced": reproduced,
        }
    }
    if truncated:
        at = len(file.lines) if cut else sidecar.get("truncated_at")
        reason = sidecar.get("truncated_reason") or TRUNCATED_REASON
        reason = UNFINISHED_REASON if cut else reason
        why = ": the proxy stopped before the session ended" if cut else ""
        summary["partial_capture"] = {"truncated_at": at, "reason": reason}
        err.write(
            f"sseproxy replay: partial capture: the messages file stops at message {at} "
            f"({reason}{why}); the turns are of those messages only\n"
        )
    out.write(orjson.dumps(summary).decode() + "\n")
    if truncated:
        return EXIT_PARTIAL
    return EXIT_REPRODUCED if reproduced else EXIT_DIFFERENT


def _recorded_states(sidecar: dict[str, Any], session: dict[str, Any]) -> list[str]:
    """The recorded turns' states: in turn order from the turn records when the sidecar kept
    them all, else sorted, from the session record's counts."""
    records = sidecar.get("turn_records")
    if isinstance(records, list) and not sidecar.get("turn_records_dropped"):
        kept = [r for r in records if isinstance(r, dict)]
        return [str(r.get("state")) for r in sorted(kept, key=lambda r: r.get("turn") or 0)]
    counts = session.get("states")
    if not isinstance(counts, dict):
        return []
    return sorted(str(s) for s, n in counts.items() for _ in range(n if isinstance(n, int) else 0))
