"""The client's WebSocket opening handshake, checked (RFC 6455 §4.2.1) before any upstream is
contacted: a handshake aiohttp would refuse only after the upstream session was open is the
proxy's own 400 (or 426 for a version it does not speak, §4.2.2), with a record."""

from __future__ import annotations

import binascii

from aiohttp import web

from sseproxy.shell.admission import Refused

# The one version RFC 6455 defines, and the only one aiohttp and websockets speak.
VERSION = "13"
# A key is 16 random bytes, base64: always 24 characters.
KEY_BYTES = 16
KEY_CHARS = 24


def _tokens(request: web.Request, name: str) -> set[str]:
    return {t.strip().lower() for v in request.headers.getall(name, ()) for t in v.split(",")}


def asks_for_websocket(request: web.Request) -> bool:
    """The request asks to become a WebSocket (its `Upgrade` names `websocket`, any case): a
    session if its handshake holds, the proxy's refusal if not; never forwarded as HTTP."""
    return "websocket" in _tokens(request, "Upgrade")


def _key_is_valid(values: list[str]) -> bool:
    if len(values) != 1 or len(values[0].strip()) != KEY_CHARS:
        return False
    try:
        return len(binascii.a2b_base64(values[0].strip(), strict_mode=True)) == KEY_BYTES
    except binascii.Error:
        return False


def check(request: web.Request) -> None:
    """Raise `Refused` unless the request is a WebSocket opening handshake the proxy can
    complete: 400 for a missing or malformed field, 426 for another version than 13."""

    def bad(message: str, headers: dict[str, str] | None = None) -> Refused:
        return Refused(400, "bad_websocket_handshake", message, close=True, headers=headers)

    if request.method != "GET":
        raise bad(f"a WebSocket handshake is a GET, not {request.method[:20]}")
    if request.version < (1, 1):
        raise bad("a WebSocket handshake needs HTTP/1.1")
    if "upgrade" not in _tokens(request, "Connection"):
        raise bad("a WebSocket handshake needs `Connection: upgrade`")
    if not _key_is_valid(request.headers.getall("Sec-WebSocket-Key", [])):
        raise bad("Sec-WebSocket-Key must be one base64-encoded 16-byte value")
    versions = [v.strip() for v in request.headers.getall("Sec-WebSocket-Version", [])]
    if not versions:
        needed = "a WebSocket handshake needs `Sec-WebSocket-Version: 13`"
        raise bad(needed, {"Sec-WebSocket-Version": VERSION})
    if versions != [VERSION]:
        raise Refused(
            426,
            "websocket_version",
            f"WebSocket version {', '.join(versions)[:40]} is not supported; this proxy speaks 13",
            close=True,
            headers={"Sec-WebSocket-Version": VERSION, "Upgrade": "websocket"},
        )
