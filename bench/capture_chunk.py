"""What capturing a chunk costs the event loop's thread: `Capture.chunk` keeping the body in
memory (as every capture did before it was written as the stream goes) vs queueing it for the
store's writer thread (what the relay calls now), and the writer's own CPU per chunk.

Small SSE chunks, one capture per round, a request with a credential (so the writer masks and
holds back); the figures are thread CPU time per chunk, median of interleaved rounds. The
writer thread works meanwhile, so the loop-side figure includes what contention it causes.
Back to back, or `spaced` (0.2 ms apart, a stream's pace: nothing is warm in the caches, and
the writer, which sleeps between its flushes, must never be woken per chunk).
Run by hand: `python -m bench.capture_chunk`.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from sseproxy.capture.format import CaptureSettings
from sseproxy.capture.store import CaptureStore
from sseproxy.observe.redact import Secrets

CHUNKS = 20_000
ROUNDS = 7
SPACED_CHUNKS = 2_000
SPACING = 0.0002  # seconds between chunks in the `spaced` modes
CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n'
SECRETS = Secrets.from_request({"authorization": "Bearer sk-bench-0123456789abcdef"}, "/", b"")
HEAD = {"content_encoding": None, "dialect": "openai-chat"}


class TimedStore(CaptureStore):
    """A store whose writer thread keeps its own CPU time (a job run on it at the end)."""

    def writer_cpu(self) -> float:
        got: list[float] = []
        self.writer.submit(lambda: got.append(time.thread_time()))
        self.writer.wait(30)
        return got[0]


def one_round(store: TimedStore, mode: str, n: int) -> tuple[float, float]:
    """(loop-side ns per chunk, writer-side ns per chunk)."""
    cap = store.new(f"r{n}", 0.0, None if mode.startswith("in memory") else HEAD, SECRETS)
    # within a round the writer thread stays the same one (it ends only when idle)
    store.writer.wait(30)
    writer_before = store.writer_cpu()
    spaced = mode.endswith("spaced")
    count = SPACED_CHUNKS if spaced else CHUNKS
    spent = 0.0
    for i in range(count):
        started = time.thread_time()
        cap.chunk(CHUNK, i * 0.001)
        spent += time.thread_time() - started
        if spaced:
            time.sleep(SPACING)  # a stream's pace: the thread's caches cool between chunks
    store.save(cap, HEAD, SECRETS)
    store.writer.wait(60)
    return spent / count * 1e9, (store.writer_cpu() - writer_before) / count * 1e9


def main() -> None:
    modes = ("in memory", "streamed", "in memory, spaced", "streamed, spaced")
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as folder:
        settings = CaptureSettings(Path(folder), max_bytes=1 << 30, max_total_bytes=1 << 32)
        store = TimedStore(settings)
        n = 0
        for _ in range(ROUNDS):
            for mode in results:
                n += 1
                results[mode].append(one_round(store, mode, n))
    for mode, rounds in results.items():
        loop = statistics.median(r[0] for r in rounds)
        writer = statistics.median(r[1] for r in rounds)
        print(f"{mode:>17}: loop {loop:7.0f} ns/chunk, writer thread {writer:7.0f} ns/chunk")


if __name__ == "__main__":
    main()
