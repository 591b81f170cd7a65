"""The shell's contact points with the core's tap: what the request asked for, opening a tap
for a response, closing it with the transport's truth."""

from __future__ import annotations

import inspect

import orjson

from ..core import Dialect, EndReason, StreamTap, TapOptions, Verdict

# The request body is parsed for `model` only when it is at most this large.
MODEL_SNIFF_BYTES = 4 * 1024 * 1024
# Until the core's close() takes the HTTP framing's verdict, it is not passed.
_CLOSE_TAKES_HTTP_COMPLETE = "http_complete" in inspect.signature(StreamTap.close).parameters


def request_model(body: bytes, path: str) -> str | None:
    """The model asked for: the request body's `model`, else the Gemini path's, best effort."""
    if body and len(body) <= MODEL_SNIFF_BYTES and body.lstrip()[:1] == b"{":
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("model"), str):
            return str(obj["model"])
    if "/models/" in path:
        return path.split("/models/", 1)[1].split(":", 1)[0].split("/", 1)[0] or None
    return None


def open_tap(
    dialect: Dialect | None,
    content_type: str | None,
    content_encoding: str | None,
    options: TapOptions,
) -> StreamTap:
    return StreamTap(
        dialect, content_type=content_type, content_encoding=content_encoding, options=options
    )


def close_tap(tap: StreamTap | None, end: EndReason | str, http_complete: bool) -> Verdict:
    """The verdict; `http_complete` is True only when the body ended by its own HTTP framing."""
    tap = tap or StreamTap(Dialect.SSE)
    if _CLOSE_TAKES_HTTP_COMPLETE:
        verdict: Verdict = tap.close(end, http_complete=http_complete)  # type: ignore[call-arg,unused-ignore]
        return verdict
    return tap.close(end)
