"""The few lines `sseproxy run` prints when the command ends: what its streams and sessions
did (states, linked retries, cuts and who caused them, provider errors), read back from the
records the proxy wrote. Bounded whatever the command sent: counts by key, a few lines named."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

# A record line longer than this is skipped (records are 1-2 KB).
MAX_LINE_BYTES = 1024 * 1024
# Streams and sessions that did not complete, named one a line; the rest are counted.
MAX_NAMED = 8
# Distinct keys counted per table; beyond, "(other)".
MAX_KEYS = 32
OTHER = "(other)"
# Who ended the bytes, by the interruption's reason (core.verdict.EndReason).
CAUSED_BY = {
    "client_disconnected": "the client",
    "upstream_closed": "the upstream",
    "upstream_reset": "the upstream",
    "upstream_protocol_error": "the upstream",
    "upstream_unreachable": "the upstream",
    "end_of_input": "the upstream",
    "idle_timeout": "the proxy (upstream silent)",
    "content_timeout": "the proxy (no content)",
    "proxy_shutdown": "the proxy (stopping)",
}
CLOSED_BY = {"client": "the client", "upstream": "the upstream", "proxy": "the proxy"}


class Tally(Counter[str]):
    """A Counter that keeps at most MAX_KEYS keys (the rest under OTHER)."""

    def add(self, key: str, n: int = 1) -> None:
        self[key if key in self or len(self) < MAX_KEYS else OTHER] += n

    def text(self) -> str:
        return ", ".join(f"{n} {key}" for key, n in self.most_common())


@dataclass
class Summary:
    streams: Tally = field(default_factory=Tally)
    sessions: Tally = field(default_factory=Tally)
    turns: Tally = field(default_factory=Tally)
    cuts: Tally = field(default_factory=Tally)
    errors: Tally = field(default_factory=Tally)
    retries: int = 0
    resumes: int = 0
    named: list[str] = field(default_factory=list)
    unnamed: int = 0
    unreadable: int = 0

    def add(self, record: dict[str, Any]) -> None:
        event = record.get("event")
        if event == "request.finished":
            self._stream(record)
        elif event == "session.finished":
            self._session(record)

    def _stream(self, r: dict[str, Any]) -> None:
        state = str(r.get("state"))
        self.streams.add(state)
        if isinstance(r.get("retry"), dict):
            self.retries += 1
        if isinstance(r.get("resume"), dict):
            self.resumes += 1
        why = ""
        interruption = r.get("interruption")
        if isinstance(interruption, dict):
            reason = str(interruption.get("reason"))
            by = CAUSED_BY.get(reason, "unknown")
            self.cuts.add(f"{reason} by {by}")
            why = f"cut: {reason} by {by}"
        error = r.get("error")
        if isinstance(error, dict):
            kind = error.get("type") or error.get("code") or "error"
            status = r.get("status")
            by = " from the proxy" if r.get("answered_by") == "proxy" else ""
            label = f"{kind} (HTTP {status}{by})" if state == "http_error" else f"{kind} (in-band)"
            self.errors.add(label)
            why = why or f"error: {label}"
        if state != "completed":
            where = f"{r.get('method')} {r.get('path')}"
            model = r.get("model") or r.get("response_model") or "-"
            ms = r.get("duration_ms")
            after = f" after {ms / 1000:.1f}s" if isinstance(ms, int | float) else ""
            self._name(f"{state:<12} {where} {model}{after}{'; ' + why if why else ''}")

    def _session(self, r: dict[str, Any]) -> None:
        turns = r.get("states")
        for state, n in turns.items() if isinstance(turns, dict) else ():
            if isinstance(n, int) and n > 0:
                self.turns.add(str(state), n)
        end = str(r.get("end_reason") or "closed")
        by = CLOSED_BY.get(str(r.get("closed_by")), "nobody (no close frame)")
        code = r.get("close_code")
        self.sessions.add(f"{end} by {by}" + (f" ({code})" if code is not None else ""))
        if end in CAUSED_BY and end != "client_disconnected":
            self.cuts.add(f"session {end} by {CAUSED_BY[end]}")
            self._name(f"{'session':<12} {r.get('path')} {end} by {CAUSED_BY[end]}")

    def _name(self, line: str) -> None:
        if len(self.named) < MAX_NAMED:
            self.named.append(line)
        else:
            self.unnamed += 1

    def lines(self) -> list[str]:
        n_streams, n_sessions = sum(self.streams.values()), sum(self.sessions.values())
        out = [f"{n_streams} streams, {n_sessions} WebSocket sessions"]
        if n_streams:
            out.append(f"  streams: {self.streams.text()}")
        if n_sessions:
            out.append(f"  sessions: {self.sessions.text()}")
            out.append(f"  session turns: {self.turns.text() or 'none'}")
        if self.retries or self.resumes:
            out.append(f"  linked: {self.retries} retries, {self.resumes} resumes")
        if self.cuts:
            out.append(f"  cuts: {self.cuts.text()}")
        if self.errors:
            out.append(f"  errors: {self.errors.text()}")
        out += [f"  {line}" for line in self.named]
        if self.unnamed:
            out.append(f"  ... and {self.unnamed} more not completed")
        if self.unreadable:
            out.append(f"  {self.unreadable} lines of the log could not be read")
        return out


def records(path: Path, offset: int) -> Iterator[dict[str, Any] | None]:
    """The JSON records of `path` after `offset`; None for a line that is not one."""
    with path.open("rb") as f:
        f.seek(offset)
        while line := f.readline(MAX_LINE_BYTES + 1):
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while (rest := f.readline(MAX_LINE_BYTES + 1)) and not rest.endswith(b"\n"):
                    pass
                yield None
                continue
            if not line.strip():
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                yield None
                continue
            yield value if isinstance(value, dict) else None


def summarise(path: Path, offset: int) -> Summary:
    summary = Summary()
    for record in records(path, offset):
        if record is None:
            summary.unreadable += 1
        else:
            summary.add(record)
    return summary
