"""`detect` looks up response headers in a table and memoises path and Content-Type matches;
it must answer as the plain scan over the registry did, for any headers and paths, and its
memos stay bounded whatever paths peers send."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect
from sseproxy.core.dialects import SPECS, _by_path, detect


def reference(path: str, headers: Mapping[str, str]) -> Dialect | None:
    """The scan `detect` replaced, kept verbatim as the reference."""
    lowered = {k.lower(): v for k, v in headers.items()}
    path = path.split("?", 1)[0]
    for spec in SPECS:
        if any(name in lowered for name in spec.response_headers):
            return spec.dialect
    for spec in SPECS:
        if spec.matches_path(path):
            return spec.dialect
    content_type = lowered.get("content-type", "").lower()
    for spec in SPECS:
        if any(part in content_type for part in spec.content_types):
            return spec.dialect
    return None


HEADER_NAMES = sorted({h for s in SPECS for h in s.response_headers} | {"Content-Type", "X-Other"})
PATH_PARTS = sorted({p for s in SPECS for p in (*s.path_suffixes, *s.path_contains)} | {"/x"})
TYPES = sorted({t for s in SPECS for t in s.content_types} | {"text/event-stream", "text/plain"})

names = st.sampled_from(HEADER_NAMES).flatmap(
    lambda n: st.sampled_from([n, n.upper(), n.lower(), n.title()])
)
values = st.sampled_from(TYPES).flatmap(lambda t: st.sampled_from([t, t.upper(), t + "; x=1"]))


@given(
    st.lists(st.sampled_from(PATH_PARTS), max_size=3).map("".join),
    st.text(max_size=5),
    st.dictionaries(names, values, max_size=4),
)
def test_detect_answers_as_the_registry_scan(path: str, query: str, headers: dict) -> None:
    target = path + ("?" + query if query else "")
    assert detect("POST", target, headers) == reference(target, headers)


def test_the_path_memo_is_bounded() -> None:
    _by_path.cache_clear()
    for i in range(300):
        detect("POST", f"/v1/unknown/{i}", {})
    info = _by_path.cache_info()
    assert info.currsize == info.maxsize == 256
