"""A client's request target, read once for routing and forwarding alike.

Routes are matched against `match_path`: the path as sent with only the escapes of unreserved
characters decoded (RFC 3986 §6.2.2.2: `%73` is `s` to every server), so every other escape
(`%2F`, `%3A`, `%25`...) stays what it is, data inside its segment. The upstream receives the
raw path, minus whole segments of a route's prefix: the two differ only where RFC 3986 says
they are equal, so a route cannot be chosen for a path it does not forward.

A path that could name a different resource to some server on the way is refused rather than
guessed at: a dot segment (`.`, `..`) in any spelling a server might decode it from
(`%2e`, `.%2E`, `%252e`, `..;x`, `..%2F`), a backslash, a control character, a malformed
escape or one that is not UTF-8. Empty segments (`//`) and anything in the query pass as
sent: they cannot climb out of a route's base path.
"""

from __future__ import annotations

import re
import string
from typing import NamedTuple
from urllib.parse import unquote

# Origin-form (RFC 9112 §3.2.1) in printable ASCII: no space, no `#`; nothing that could be
# read as a scheme or an authority.
ORIGIN_FORM = re.compile(r"/[\x21\x22\x24-\x7e]*")
ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
MALFORMED_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
DOT_SEGMENTS = frozenset({".", ".."})


class BadTarget(ValueError):
    """A request target the proxy refuses to route (400 `bad_target`)."""


class Target(NamedTuple):
    """Immutable. A NamedTuple rather than a frozen dataclass: it is built for every request,
    and a frozen dataclass takes about twice as long to build."""

    path: str  # as sent, up to the first `?`
    query: str  # as sent, after the first `?` ("" when there is none)
    match_path: str  # what route patterns and prefixes are compared with

    def strip(self, prefix: str) -> str:
        """The raw path without `prefix`, removed only as whole segments (`/ds` strips
        `/ds/x` to `/x`, never `/dsx`)."""
        if prefix in ("", "/"):
            return self.path
        prefix = match_form(prefix)
        if self.match_path != prefix and not self.match_path.startswith(prefix + "/"):
            return self.path
        # match_path has its `/` exactly where the raw path has them: the same segments.
        rest = self.path.split("/")[prefix.count("/") + 1 :]
        return "/" + "/".join(rest)


def match_form(path: str) -> str:
    """`path` with the escapes of unreserved characters decoded, every other escape kept."""
    if "%" not in path:
        return path
    return ESCAPE.sub(_unreserved, path)


def _unreserved(escape: re.Match[str]) -> str:
    char = chr(int(escape.group(1), 16))
    return char if char in UNRESERVED else escape.group(0)


def parse_target(raw: str) -> Target:
    """The target of `raw` (aiohttp's `request.raw_path`), or BadTarget saying why not."""
    if not ORIGIN_FORM.fullmatch(raw):
        raise BadTarget("not an origin-form request target")
    path, _, query = raw.partition("?")
    if "%" not in path and "." not in path and "\\" not in path:
        return Target(path, query, path)  # the usual target: nothing to decode or check
    spellings = [path]
    if "%" in path:
        if MALFORMED_ESCAPE.search(path):
            raise BadTarget("a malformed percent-escape in the path")
        try:
            once = unquote(path, errors="strict")
            spellings.append(once)
            if "%" in once:
                spellings.append(unquote(once, errors="strict"))  # a server decoding twice
        except UnicodeDecodeError:
            # Not UTF-8: e.g. an overlong `%C0%AE`, which an old decoder reads as a dot.
            raise BadTarget("an escape that is not UTF-8 in the path") from None
    for spelling in spellings:
        if "\\" in spelling:  # a separator to some servers
            raise BadTarget("a backslash in the path")
        if CONTROL.search(spelling):
            raise BadTarget("a control character in the path")
        if "." in spelling and any(
            piece.partition(";")[0] in DOT_SEGMENTS for piece in spelling.split("/")
        ):
            raise BadTarget("a dot segment in the path")
    return Target(path, query, match_form(path))
