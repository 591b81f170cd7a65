"""ContentStore keeps text up to its cap and still knows every part's length past it."""

from __future__ import annotations

from sseproxy.core.dialects.base import ContentStore


def test_parts_past_the_cap_are_counted_and_compared_by_length() -> None:
    store = ContentStore(cap=4)
    store.add("a", "ab")
    store.add("a", "cde")  # would pass the cap: dropped, counted
    store.add("b", "x")  # still fits
    assert (store.chars, store.retained, store.truncated) == (6, 3, True)
    assert (store.text("a"), store.text("b")) == ("ab", "x")
    assert (store.length("a"), store.length("b"), store.length("c")) == (5, 1, 0)
    assert store.matches("a", "abcde") and store.matches("a", "vwxyz")  # by length only
    assert not store.matches("a", "abcd")
    assert store.matches("b", "x") and not store.matches("b", "xy")


def test_below_the_cap_snapshots_are_compared_by_text() -> None:
    store = ContentStore(cap=10)
    store.add("a", "ab")
    store.add("a", "cd")
    assert store.matches("a", "abcd") and not store.matches("a", "abce")
    assert not store.truncated and store.length("a") == 4
