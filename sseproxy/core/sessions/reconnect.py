"""Across sessions: a client that reconnects again and again (`reconnect_loop`)."""

from __future__ import annotations

# `reconnect_loop`: this many sessions opened with the same route and credentials within
# RECONNECT_WINDOW_S seconds (a client that reconnects on every error, e.g. insufficient_quota
# every 300 ms). Clients tracked: the most recent MAX_RECONNECT_KEYS.
RECONNECT_SESSIONS = 5
RECONNECT_WINDOW_S = 10.0
MAX_RECONNECT_KEYS = 1024


class ReconnectWatch:
    """Sessions opened per (route, credentials), over a sliding window; the shell gives the
    clock readings. Keys are hashes: no credential is kept."""

    def __init__(self) -> None:
        self._opened: dict[int, list[float]] = {}

    def opened(self, route: str | None, credentials: tuple[str, ...], now: float) -> bool:
        """Note a session opening at `now`; True when it makes a reconnect loop."""
        key = hash((route, credentials))
        times = [t for t in self._opened.pop(key, []) if now - t <= RECONNECT_WINDOW_S]
        times = [*times[-(RECONNECT_SESSIONS - 1) :], now]
        self._opened[key] = times  # most recent last: the oldest key goes first
        if len(self._opened) > MAX_RECONNECT_KEYS:
            del self._opened[next(iter(self._opened))]
        return len(times) >= RECONNECT_SESSIONS
