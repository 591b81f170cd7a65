"""Credentials: found once per request, then kept out of everything the proxy writes.

`Secrets.from_request` collects the credential values one request carries. `redact` takes them
(and anything shaped like a provider's key) out of a record; `mask` takes them out of a
captured body with the same number of bytes, so a capture's offsets, chunk sizes and replayed
verdict stay exactly as recorded. A credential value becomes a run of `*` as long as itself in
both, so a replayed masked body yields the very text the redacted record holds.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_plus

import orjson

from sseproxy.core.request import Members, body_members

REDACTED = "[redacted]"
MASK = "*"
USERINFO_MASK = "***"  # as config.mask_userinfo prints a route's URL
# Shorter values are not searched for in free text: masking every "1" of a body because a
# cookie was "1" would destroy the capture. Their own fields are still redacted by name.
MIN_SECRET_CHARS = 8
# Decoding rounds for names and values: `%253F` is a `?` encoded twice.
DECODE_ROUNDS = 3

# Header names, query parameters and JSON keys whose values are credentials (lower case).
SECRET_KEYS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "anthropic-api-key",
        "x-auth-token",
        "cookie",
        "set-cookie",
        "key",
        "api_key",
        "apikey",
        "access_token",
        "token",
        "client_secret",
        "password",
    }
)
# Query parameters whose values are credentials besides those: signed URLs' (S3, GCS, Azure
# SAS `sig`), OAuth's and plain passwords. Not in SECRET_KEYS: a record's `signature` (a
# thinking block's) is not a secret.
QUERY_SECRET_KEYS = SECRET_KEYS | {
    "secret",
    "signature",
    "sig",
    "passwd",
    "pwd",
    "refresh_token",
    "id_token",
    "session",
    "sessionid",
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-credential",
    "x-goog-signature",
    "x-goog-credential",
}
# ...and any parameter whose last word says so (`private_key`, `X-Ms-Token`, `app.secret`).
SECRET_PARAM_WORD = re.compile(r"[_.-](?:key|token|secret|signature|password|passwd)$")
# Any other header whose name says it holds a credential.
SENSITIVE_NAME = re.compile(r"auth|key|token|secret|cookie|session|password", re.IGNORECASE)
# ...but for an identifier, whose name says `session` and whose value grants nothing: a name
# ending in `session-id` (MCP's `Mcp-Session-Id`, Codex's `session-id`, Claude Code's
# `x-claude-code-session-id`) or `session-affinity` (opencode's), or opencode's
# `x-opencode-session`, names a session or an agent's run, and the record shows it. The rest of
# such a name is still read (`x-auth-session-id` says credential). A bare `session` or
# `x-session-token` stays a credential.
SESSION_ID_TAIL = re.compile(r"(?:^|[-_])session[-_](?:id|affinity)$|^x-opencode-session$")

# The key shapes of every provider routed by default, wherever they appear. At least 8 token
# characters after the prefix, so words such as `sk-learn` or `hf_hub` stay readable.
KEY_SHAPES = re.compile(
    # a URL's userinfo (`https://user:pass@host`), unless masked already as config prints it
    r"(?<=://)(?P<userinfo>(?!\*+@)[^/?#@\s]+)(?=@)"
    r"|(?<![A-Za-z0-9_-])(?:"
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_-]{8,}"  # OpenAI, Anthropic, DeepSeek, OpenRouter, ...
    r"|(?:gsk_|r8_|hf_)[A-Za-z0-9]{8,}"  # Groq, Replicate, Hugging Face
    r"|xai-[A-Za-z0-9]{8,}"  # xAI
    r"|AIza[0-9A-Za-z_-]{8,}"  # Google
    r"|(?P<scheme>(?i:bearer)\s+)[A-Za-z0-9._~+/=-]{8,}"
    r")"
)
# Lower-case text every key shape contains: without one of them, the regex is not run.
SHAPE_HINTS = ("sk-", "gsk_", "r8_", "hf_", "xai-", "aiza", "bearer")
# ...and, in a JSON-rendered record, a credential's name as a key (`"authorization":`).
_RECORD_HINTS = SHAPE_HINTS + tuple(f'"{key}":' for key in sorted(SECRET_KEYS))
# Each credential name ends with one of these: a JSON text holding none of them holds none of
# the `"name":` hints either, so the 16 names are looked for only after one of 6 tails.
_NAME_TAILS = tuple(
    f'{tail}":'.encode()
    for tail in ("key", "token", "cookie", "authorization", "secret", "password")
)
assert all(any(t.decode() in f'"{k}":' for t in _NAME_TAILS) for k in SECRET_KEYS)
_SHAPE_HINTS_B = tuple(h.encode() for h in SHAPE_HINTS)
_NAME_HINTS_B = tuple(f'"{key}":'.encode() for key in sorted(SECRET_KEYS))
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')


def _enc(hex_pattern: str) -> str:
    """A percent-encoded delimiter, encoded any number of times (`%3F`, `%253F`, ...)."""
    return rf"%(?:25)*{hex_pattern}"


# One `name=value` parameter of a request target: in its query, or smuggled into its path
# percent-encoded (`/v1/x%3Fkey=SECRET`).
_TARGET_PARAM = re.compile(
    rf"(?P<lead>[?&;]|{_enc('3[Ff]')}|{_enc('26')}|{_enc('3[Bb]')})"
    # A name never runs over an encoded delimiter, and is short (ours are, even encoded twice):
    # each lead costs a bounded look, the whole target linear time.
    r"(?P<name>(?:[^=&;#%?/]|%(?!(?:25)*(?:3[FfDdBb]|2[36]))[0-9A-Fa-f]{2}){1,128}?)"
    rf"(?P<eq>=|{_enc('3[Dd]')})"
    r"(?P<value>.*?)"
    rf"(?=[&;#]|{_enc('26')}|{_enc('3[Bb]')}|{_enc('23')}|$)"
)


def _decoded(text: str) -> str:
    for _ in range(DECODE_ROUNDS):
        plain = unquote_plus(text)
        if plain == text:
            break
        text = plain
    return text


def _shape(match: re.Match[str]) -> str:
    if match.group("userinfo"):
        return USERINFO_MASK
    return (match.group("scheme") or "") + REDACTED


def redact_shapes(text: str) -> str:
    """`text` with anything shaped like a provider key replaced (`Bearer ` is kept), and any
    URL's userinfo masked (`https://***@host`)."""
    if not _hinted(text.lower(), SHAPE_HINTS):
        return text  # substring tests are much cheaper than the regex on every position
    return KEY_SHAPES.sub(_shape, text)


def _hinted(lowered: str, hints: tuple[str, ...]) -> bool:
    return any(hint in lowered for hint in hints) or ("@" in lowered and "://" in lowered)


# Record keys seen to hold no key shape's hint, no credential's name and no `@` (bounded).
_KNOWN_KEYS: set[str] = set()
MAX_KNOWN_KEYS = 1024


def _learn_keys(record: dict[Any, Any]) -> None:
    for key in record:
        if len(_KNOWN_KEYS) >= MAX_KNOWN_KEYS:
            return
        if type(key) is str and key.isascii() and not is_secret_key(key):
            lowered = key.lower()
            if "@" not in lowered and not any(hint in lowered for hint in SHAPE_HINTS):
                _KNOWN_KEYS.add(key)


def names_credential(lower: str) -> bool:
    """A header's lower-case name says its value is a credential (an identifier's does not)."""
    if lower in SECRET_KEYS:
        return True
    return SENSITIVE_NAME.search(SESSION_ID_TAIL.sub("", lower)) is not None


def is_secret_key(name: object) -> bool:
    return isinstance(name, str) and name.lower() in SECRET_KEYS


@dataclass(frozen=True, slots=True)
class Secrets:
    """The credential values of one request, longest first. Built once, shared by every sink."""

    values: tuple[str, ...] = ()
    raw: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    _json_safe: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kept = {v for v in self.values if len(v) >= MIN_SECRET_CHARS}
        values = tuple(sorted(kept, key=lambda v: (-len(v), v)))  # longest first, then stable
        object.__setattr__(self, "values", values)
        # Header values arrive decoded with surrogateescape: encode them back to their bytes.
        raw = {v.encode("utf-8", "surrogateescape") for v in values}
        object.__setattr__(self, "raw", tuple(sorted(raw, key=len, reverse=True)))
        safe = not any(_JSON_ESCAPED.search(v) for v in values)
        object.__setattr__(self, "_json_safe", safe)

    @classmethod
    def from_request(cls, headers: Mapping[str, str], raw_target: str, body: bytes) -> Secrets:
        """Every credential value in the request's headers, target (query or encoded query)
        and JSON body (its top-level `api_key` and the like)."""
        found: set[str] = set()
        _header_secrets(headers, found)
        _target_secrets(raw_target, found)
        found.update(_json_values(body_members(body)))
        return cls(tuple(found))

    @classmethod
    def of_request(cls, headers: Mapping[str, str], raw_target: str) -> tuple[Secrets, str]:
        """`from_request(headers, raw_target, b"")` and its `redact_target(raw_target)`, with
        one look at the target: a target without credential parameters is only searched for
        the values and shapes `redact_text` masks."""
        found: set[str] = set()
        _header_secrets(headers, found)
        clean = raw_target in _CLEAN_TARGETS
        named = not clean and _target_secrets(raw_target, found)
        secrets = cls(tuple(found)) if found else NO_SECRETS
        if named:
            return secrets, secrets.redact_target(raw_target)
        if clean:  # no credential parameter, no key shape: only this request's values remain
            return secrets, secrets.mask_values(raw_target)
        if (
            len(raw_target) <= MAX_CLEAN_TARGET_CHARS
            and len(_CLEAN_TARGETS) < MAX_CLEAN_TARGETS
            and not _hinted(raw_target.lower(), SHAPE_HINTS)
        ):
            _CLEAN_TARGETS.add(raw_target)
        return secrets, secrets.redact_text(raw_target)

    def with_body(self, body: bytes) -> Secrets:
        """These secrets plus the body's (for a value built before the body was read)."""
        return self.with_json_body(body_members(body))

    def with_json_body(self, obj: object) -> Secrets:
        """These secrets plus those of a body the caller parsed already (one parse per
        request): its top-level `api_key` and the like."""
        found = _json_values(obj)
        return Secrets(self.values + tuple(found)) if found else self

    def redact_text(self, text: str) -> str:
        return redact_shapes(self.mask_values(text))

    def mask_values(self, text: str) -> str:
        """`text` with each of these credential values overwritten by as many `*`."""
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK * len(value))
        return text

    def redact(self, value: Any) -> Any:
        """`value` (str, or dicts and lists of them, as deep as they go) with every credential
        value masked, every key shape and every value under a credential's name replaced.
        Returns `value` itself, uncopied, when there is nothing to redact."""
        if isinstance(value, str):
            return self.redact_text(value)
        if not self._suspect(value):
            return value
        return self._walk(value)

    def _suspect(self, value: Any) -> bool:
        """False only when walking `value` would change nothing: one JSON rendering, then
        substring tests (a credential value, a key shape's hint, a credential's name)."""
        if not self._json_safe:
            return True
        if type(value) is dict and _KNOWN_KEYS.issuperset(value):
            # The usual record: its own keys were looked at already (a credential's value,
            # which differs per request, is still looked for in them); only the values remain.
            keys = "\0".join(value)
            if any(v in keys for v in self.values):
                return True
            value = list(value.values())
        elif type(value) is dict:
            _learn_keys(value)
        try:
            data = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            return True  # what JSON cannot carry is looked at value by value
        if not data.isascii():
            # str.lower can make ASCII of other letters (the Kelvin sign K becomes k)
            text = data.decode()
            return any(v in text for v in self.values) or _hinted(text.lower(), _RECORD_HINTS)
        # ASCII: the bytes as they are, lowered as str.lower would (no decoding, no copy).
        if any(raw in data for raw in self.raw):
            return True
        lowered = data.lower()
        if any(hint in lowered for hint in _SHAPE_HINTS_B):
            return True
        if any(tail in lowered for tail in _NAME_TAILS) and any(
            hint in lowered for hint in _NAME_HINTS_B
        ):
            return True
        return b"@" in lowered and b"://" in lowered

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, Mapping):
            return {
                (self.redact_text(k) if isinstance(k, str) else k): (
                    REDACTED if is_secret_key(k) and v else self._walk(v)
                )
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        if isinstance(value, bytes | bytearray):
            return self.mask(bytes(value))
        return value

    def found_in(self, data: bytes) -> bool:
        return any(raw in data for raw in self.raw)

    def mask(self, data: bytes, *, cut: bool = False) -> bytes:
        """`data` with each credential value overwritten by as many `*` bytes. With `cut`
        (a body truncated at a cap), a value's first bytes at the very end are masked too."""
        for raw in self.raw:
            if raw in data:
                data = data.replace(raw, b"*" * len(raw))
        if cut:
            for raw in self.raw:
                data = _mask_cut_value(data, raw)
        return data

    def redact_target(self, raw_target: str) -> str:
        """The request target as sent, with credential parameters' values replaced, also
        when the query was smuggled into the path percent-encoded."""

        def param(match: re.Match[str]) -> str:
            if not match.group("value") or not _secret_name(match.group("name")):
                return match.group(0)
            return match.group("lead") + match.group("name") + match.group("eq") + REDACTED

        return self.redact_text(_TARGET_PARAM.sub(param, raw_target))


NO_SECRETS = Secrets()


def _mask_cut_value(data: bytes, raw: bytes) -> bytes:
    """`data` with the longest beginning of `raw` (at least MIN_SECRET_CHARS) that ends it
    masked. Only places where `raw`'s first bytes occur are compared."""
    tail = data[-(len(raw) - 1) :]
    head = raw[:MIN_SECRET_CHARS]
    start = tail.find(head)
    while start != -1:
        rest = tail[start:]
        if raw.startswith(rest):
            return data[: len(data) - len(rest)] + b"*" * len(rest)
        start = tail.find(head, start + 1)
    return data


# Request targets seen to hold no credential parameter and no key shape's hint (bounded, as
# _KNOWN_KEYS is): only a request's own credential values are looked for in them again.
# (Masking those cannot make a hint: `*` is in none.)
_CLEAN_TARGETS: set[str] = set()
MAX_CLEAN_TARGETS = 256
MAX_CLEAN_TARGET_CHARS = 1024
# Header names (as sent) seen to name a credential or not; bounded, as _KNOWN_KEYS is.
_HEADER_NAMES: dict[str, bool] = {}
MAX_HEADER_NAMES = 1024
# Without one of these, a request target has no `name=value` parameter (_TARGET_PARAM's leads).
_PARAM_LEADS = ("?", "&", ";", "%")
# Each credential name ends with one of these: a target without `%` (nothing encoded) and
# without any of them followed by `=` has no credential parameter.
_PARAM_TAILS = tuple(
    f"{tail}="
    for tail in (
        *("key", "token", "cookie", "authorization", "secret", "password", "passwd", "pwd"),
        *("signature", "sig", "session", "sessionid", "credential"),
    )
)
assert all(any(key.endswith(tail[:-1]) for tail in _PARAM_TAILS) for key in QUERY_SECRET_KEYS)


def _header_secrets(headers: Mapping[str, str], found: set[str]) -> None:
    names = _HEADER_NAMES
    for name, value in headers.items():
        secret = names.get(name)
        if secret is None:
            secret = names_credential(name.lower())
            if len(names) < MAX_HEADER_NAMES:
                names[name] = secret
        if secret:
            _header_values(name.lower(), value, found)


def _target_secrets(raw_target: str, found: set[str]) -> bool:
    """Add the values of the target's credential parameters; True when there was one."""
    if not any(lead in raw_target for lead in _PARAM_LEADS):
        return False
    if "%" not in raw_target:
        lowered = raw_target.lower()  # as `_secret_name` lowers a name
        if not any(tail in lowered for tail in _PARAM_TAILS):
            return False
    named = False
    for match in _TARGET_PARAM.finditer(raw_target):
        if _secret_name(match.group("name")):
            named = True
            value = match.group("value")
            found.update((value, unquote(value), _decoded(value)))
    return named


def _secret_name(name: str) -> bool:
    """A target parameter's name, decoded as often as it was encoded, names a credential."""
    if "%" in name or "+" in name:
        name = _decoded(name)
    name = name.lower()
    return name in QUERY_SECRET_KEYS or SECRET_PARAM_WORD.search(name) is not None


def _header_values(name: str, value: str, found: set[str]) -> None:
    value = value.strip()
    found.add(value)
    if name == "cookie":
        for pair in value.split(";"):
            found.add(pair.partition("=")[2].strip().strip('"'))
        return
    scheme, _, credentials = value.partition(" ")
    credentials = credentials.strip()
    found.add(credentials)
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return
        found.update((decoded, decoded.partition(":")[2]))


def _json_values(obj: object) -> list[str]:
    """The string values of a JSON object's top-level members named as credentials (only
    those members are decoded from a body's `Members`)."""
    if not isinstance(obj, dict | Members):
        return []
    found = (obj.get(k) for k in obj if is_secret_key(k))
    return [v for v in found if isinstance(v, str)]
