"""The event loop's longest callbacks and iterations while the proxy runs: a measure of its
fairness that a shared machine does not blur as it blurs healthz latencies.

`python -m bench.loop_trace OUT.json -- [sseproxy arguments]` runs `sseproxy` in this process
with a timer every millisecond whose lag is measured in the loop thread's CPU time (any loop:
the CPU the loop spent elsewhere before it could run, time the process was descheduled aside).
On asyncio's own loop (`--event-loop asyncio`: uvloop's callbacks cannot be timed from Python)
every callback is timed on that clock too. At exit OUT.json gets: the lags (histogram, worst);
histograms of callback and iteration durations (an iteration: the callbacks one poll made
ready, run back to back; its busy time is their sum); the longest iterations, with their
callbacks per label (a task's coroutine, else the function); the labels of callbacks that
ever took 1 ms or more; the main thread's stacks, sampled while a callback had run over 2 ms
(biased towards calls that release the GIL); the collector's pauses per generation.
`bench.fairness --sseproxy SCRIPT` runs a scenario against such a proxy (SCRIPT: an
executable that runs this module with the arguments it is given and an OUT of its own).
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import atexit
import gc
import json
import os
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EDGES_MS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
LONGEST = 20  # iterations kept, longest first
LAG_INTERVAL_S = 0.001
GC_LONG_MS = 5.0
LAG_AFTER_S = 1.0  # the loop's first second (the proxy's start) is not measured
SAMPLE_AFTER_S = 0.002  # a callback running this long is sampled
SAMPLE_EVERY_S = 0.0005
# The sampler only runs when the loop gives up the GIL: a short switch interval lets it in.
SWITCH_INTERVAL_S = 0.0005
STACK_FRAMES = 12


def bucket(ms: float) -> str:
    for edge in EDGES_MS:
        if ms < edge:
            return f"<{edge:g}"
    return f">={EDGES_MS[-1]:g}"


def label(handle: asyncio.Handle) -> str:
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {getattr(coro, '__qualname__', repr(coro))}"
    name = getattr(callback, "__qualname__", None) or type(callback).__name__
    if owner is not None:
        name = f"{type(owner).__name__}.{name.rsplit('.', 1)[-1]}"
    return str(name)


@dataclass
class Trace:
    callbacks: Counter[str] = field(default_factory=Counter)
    iterations: Counter[str] = field(default_factory=Counter)
    per_label: dict[str, list[float]] = field(default_factory=dict)  # count, total ms, max ms
    longest: list[tuple[float, int, list[tuple[str, int, float]]]] = field(default_factory=list)
    stacks: Counter[str] = field(default_factory=Counter)
    it_busy: float = 0.0
    it_count: int = 0
    it_top: list[tuple[str, float]] = field(default_factory=list)
    it_all: list[tuple[asyncio.Handle, float]] = field(default_factory=list)
    running_since: float | None = None  # the running callback's start, wall clock
    gc_started: float = 0.0
    gc_long: list[tuple[int, float, float]] = field(default_factory=list)
    gc_ms: dict[str, list[float]] = field(default_factory=dict)  # per generation: count, max

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.thread_time()
        if phase == "start":
            self.gc_started = now
            return
        entry = self.gc_ms.setdefault(f"gen{info['generation']}", [0, 0.0, 0.0])
        ms = (now - self.gc_started) * 1000
        entry[0] += 1
        entry[1] += ms
        entry[2] = max(entry[2], ms)
        if ms >= GC_LONG_MS:  # when: at the start (imports), or under the scenario's load
            self.gc_long.append((info["generation"], round(ms, 2), round(time.monotonic(), 3)))

    def dump(self, path: Path, lags: list[Lag]) -> None:
        labels = sorted(self.per_label.items(), key=lambda kv: -kv[1][2])
        report: dict[str, Any] = {
            "timer_lag_ms": {
                "count": sum(lag.count for lag in lags),
                "histogram": dict(sum((lag.lags for lag in lags), Counter())),
                "worst": sorted((w for lag in lags for w in lag.worst), reverse=True)[:LONGEST],
            },
            "callbacks_ms": dict(self.callbacks),
            "iterations_ms": dict(self.iterations),
            "longest_iterations": [
                {"busy_ms": round(b, 2), "callbacks": n, "top": top}
                for b, n, top in sorted(self.longest, reverse=True)
            ],
            "labels_over_1ms": {
                k: {"count": int(v[0]), "total_ms": round(v[1], 1), "max_ms": round(v[2], 2)}
                for k, v in labels
            },
            "gc_count_total_max_ms": {
                k: [int(v[0]), round(v[1], 1), round(v[2], 2)] for k, v in self.gc_ms.items()
            },
            "gc_long": self.gc_long,
            "exited": round(time.monotonic(), 3),
            "stack_samples": dict(self.stacks.most_common(40)),
        }
        path.write_text(json.dumps(report, indent=1))


def install(trace: Trace) -> None:
    """Wraps Handle._run and the loop's _run_once (asyncio's pure-Python loop only)."""
    clock = time.thread_time
    run = asyncio.Handle._run
    run_once = asyncio.base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def timed_run(self: asyncio.Handle) -> None:
        start = clock()
        trace.running_since = time.perf_counter()
        try:
            run(self)
        finally:
            trace.running_since = None
            ms = (clock() - start) * 1000
            trace.callbacks[bucket(ms)] += 1
            trace.it_busy += ms
            trace.it_count += 1
            trace.it_all.append((self, ms))
            if ms >= 1.0:
                name = label(self)
                entry = trace.per_label.setdefault(name, [0, 0.0, 0.0])
                entry[0] += 1
                entry[1] += ms
                entry[2] = max(entry[2], ms)
                trace.it_top.append((name, round(ms, 2)))

    def timed_run_once(self: Any) -> None:
        trace.it_busy, trace.it_count, trace.it_top, trace.it_all = 0.0, 0, [], []
        run_once(self)
        if trace.it_count:
            trace.iterations[bucket(trace.it_busy)] += 1
            if len(trace.longest) < LONGEST or trace.it_busy > trace.longest[-1][0]:
                by_label: dict[str, list[float]] = {}
                for handle, ms in trace.it_all:
                    entry = by_label.setdefault(label(handle), [0, 0.0])
                    entry[0] += 1
                    entry[1] += ms
                top = sorted(
                    ((k, int(v[0]), round(v[1], 2)) for k, v in by_label.items()),
                    key=lambda t: -t[2],
                )[:6]
                trace.longest.append((trace.it_busy, trace.it_count, top))
                trace.longest.sort(reverse=True)
                del trace.longest[LONGEST:]

    setattr(asyncio.Handle, "_run", timed_run)  # noqa: B010 - private: no attribute to type
    setattr(asyncio.base_events.BaseEventLoop, "_run_once", timed_run_once)  # noqa: B010


class Lag:
    """On any loop (uvloop too): a timer every LAG_INTERVAL_S whose lag is measured in the
    loop thread's CPU time from its arming to its run, so the CPU the loop spent on other
    work before it could run (what a health check waits, on an otherwise idle machine)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lags: Counter[str] = Counter()
        self.worst: list[float] = []
        self.count = 0
        self._armed = time.thread_time()
        self._from = time.monotonic() + LAG_AFTER_S
        loop.call_later(LAG_INTERVAL_S, self._tick)

    def _tick(self) -> None:
        if time.monotonic() < self._from:
            self._armed = time.thread_time()
            self.loop.call_later(LAG_INTERVAL_S, self._tick)
            return
        ms = (time.thread_time() - self._armed) * 1000
        self.lags[bucket(ms)] += 1
        self.count += 1
        self.worst = sorted([*self.worst, round(ms, 2)], reverse=True)[:LONGEST]
        self._armed = time.thread_time()
        self.loop.call_later(LAG_INTERVAL_S, self._tick)


def lag_on_every_loop(lags: list[Lag]) -> None:
    """The proxy's loop factory wrapped so that every loop it makes carries a Lag probe."""
    import sseproxy.server as server

    choose = server.choose_loop

    def choose_loop(preference: str) -> tuple[str, Any]:
        name, factory = choose(preference)

        def make() -> asyncio.AbstractEventLoop:
            loop = factory() if factory is not None else asyncio.new_event_loop()
            lags.append(Lag(loop))
            return loop

        return name, make

    server.choose_loop = choose_loop


def sampler(trace: Trace, main_id: int) -> None:
    """Samples the main thread's stack while a callback runs longer than SAMPLE_AFTER_S."""
    while True:
        time.sleep(SAMPLE_EVERY_S)
        since = trace.running_since
        if since is None or time.perf_counter() - since < SAMPLE_AFTER_S:
            continue
        frame = sys._current_frames().get(main_id)
        if frame is None:
            continue
        stack = traceback.extract_stack(frame)[-STACK_FRAMES:]
        where = " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in stack[::-1])
        trace.stacks[where] += 1


def main() -> int:
    argv = sys.argv[1:]
    out = Path(argv[0])
    rest = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
    trace = Trace()
    install(trace)
    gc.callbacks.append(trace.on_gc)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    lags: list[Lag] = []
    lag_on_every_loop(lags)
    if os.environ.get("LOOP_TRACE_GC0"):  # an experiment: another young-generation threshold
        import sseproxy.server as server

        gen0 = int(os.environ["LOOP_TRACE_GC0"])
        server.GC_THRESHOLDS = (gen0, *server.GC_THRESHOLDS[1:])
    atexit.register(trace.dump, out, lags)
    threading.Thread(target=sampler, args=(trace, threading.get_ident()), daemon=True).start()
    from sseproxy.cli import main as sseproxy_main

    return sseproxy_main(rest)


if __name__ == "__main__":
    sys.exit(main())
