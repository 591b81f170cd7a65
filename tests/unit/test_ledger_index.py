"""The ledger's index (shell/ledger.py): a retry is found through (kind of key, route, digest)
-> the newest kept stream, not by a walk; the index stays within the ledger's bound; two keys
that collide in the keyed hash still differ; a body is not digested when no link can come of
it. Checked against a walk over every kept stream, as the ledger did before the index."""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

import orjson
import pytest

from sseproxy.core import State
from sseproxy.shell import ledger as ledger_module
from sseproxy.shell.ledger import (
    RETRIED_STATES,
    BodyKeys,
    Ended,
    Ledger,
    LedgerLimits,
    body_keys,
    linked_by,
)

PATH = "/v1/responses"


def ended(
    request_id: str,
    body: bytes,
    state: State = State.INTERRUPTED,
    route: str = "openai",
    keys: BodyKeys | None = None,
) -> Ended:
    return Ended(
        request_id=request_id,
        started=0.0,
        method="GET" if keys is not None else "POST",
        path=PATH,
        headers={},
        body=body,
        route=route,
        session_id=None,
        state=state,
        response_id=None,
        events=(),
        delivered=0,
        retry_ms=None,
        text=None,
        websocket=keys is not None,
        keys=keys,
    )


def turn(n: int) -> bytes:
    """A streamed JSON body with a turn id: four keys (exact, meaning, asked, turn)."""
    meta = {"turn_id": f"turn-{n}"}
    return orjson.dumps({"model": "m", "input": f"q{n}", "stream": True, "client_metadata": meta})


def of(links: Any) -> tuple[str, str] | None:
    retry = links.retry
    return None if retry is None else (retry["of"], retry["linked_by"])


@pytest.mark.parametrize("extra", [0, 1])
def test_the_index_stays_within_the_bound_and_one_more(extra: int) -> None:
    bound = 4
    ledger = Ledger(LedgerLimits(streams=bound, seconds=600))
    for n in range(bound + extra):
        ledger.link(ended(f"q{n}", turn(n)), now=float(n))
    assert len(ledger) == bound
    assert ledger.indexed == 4 * bound  # four keys per kept stream, none of the evicted one's
    gone = ledger.link(ended("again-0", turn(0)), now=10.0)
    kept = ledger.link(ended("again-last", turn(bound + extra - 1)), now=11.0)
    assert of(gone) == (None if extra else ("q0", "same_body"))
    assert of(kept) == (f"q{bound + extra - 1}", "same_body")
    # again-last has the keys of the stream it repeats: one entry each, for the newer
    assert len(ledger) == bound and ledger.indexed == 4 * (bound - 1)


def test_expired_streams_leave_the_index() -> None:
    ledger = Ledger(LedgerLimits(streams=8, seconds=10))
    ledger.link(ended("q0", turn(0)), now=0.0)
    ledger.link(ended("q1", turn(1)), now=1.0)
    assert ledger.indexed == 8
    assert of(ledger.link(ended("q2", turn(0)), now=20.0)) is None  # q0 and q1 expired
    assert len(ledger) == 1 and ledger.indexed == 4  # q2's own keys only


def test_two_streams_with_the_same_key_the_newest_wins() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", turn(0)), now=0.0)
    ledger.link(ended("q1", turn(0), State.FAILED), now=1.0)
    assert of(ledger.link(ended("q2", turn(0)), now=2.0)) == ("q1", "same_body")


def test_the_newest_stream_wins_across_kinds_of_key() -> None:
    """q0 has the same bytes as q2, q1 only the same meaning: q1 is newer, so q2 repeats it."""
    body = {"model": "m", "input": "q", "stream": True}
    reordered = dict(reversed(body.items()))
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", orjson.dumps(body)), now=0.0)
    ledger.link(ended("q1", orjson.dumps(reordered)), now=1.0)
    assert of(ledger.link(ended("q2", orjson.dumps(body)), now=2.0)) == ("q1", "same_meaning")


def test_a_newer_completed_stream_with_another_kind_of_key_hides_an_older_cut_one() -> None:
    body = {"model": "m", "input": "q", "stream": True}
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", orjson.dumps(body)), now=0.0)
    done = ledger.link(ended("q1", orjson.dumps(dict(reversed(body.items()))), State.COMPLETED), 1)
    assert of(done) == ("q0", "same_meaning")
    assert of(ledger.link(ended("q2", orjson.dumps(body)), now=2.0)) is None


def test_keys_that_collide_in_the_keyed_hash_do_not_link(monkeypatch) -> None:
    monkeypatch.setattr(ledger_module, "_keyed_hash", lambda parts: 0)
    a, b = b"not json: a", b"not json: b"
    assert body_keys("POST", PATH, a).exact != body_keys("POST", PATH, b).exact
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", a), now=0.0)
    assert of(ledger.link(ended("q1", b), now=1.0)) is None
    assert of(ledger.link(ended("q2", a), now=2.0)) == ("q0", "same_body")


def test_keys_that_collide_in_both_digests_would_link(monkeypatch) -> None:
    """The counterpart of the test above: the CRC is what told them apart."""
    monkeypatch.setattr(ledger_module, "_keyed_hash", lambda parts: 0)
    monkeypatch.setattr(ledger_module.zlib, "crc32", lambda data, value=0: 0)
    assert body_keys("POST", PATH, b"a").exact == body_keys("POST", PATH, b"b").exact


def test_a_request_that_ended_well_is_not_digested_while_no_link_can_come_of_it(
    monkeypatch,
) -> None:
    calls: list[bytes] = []
    real = ledger_module.body_keys

    def counted(method: str, path: str, body: bytes, *args: Any, **kw: Any) -> BodyKeys:
        calls.append(body)
        return real(method, path, body, *args, **kw)

    monkeypatch.setattr(ledger_module, "body_keys", counted)
    ledger = Ledger(LedgerLimits())
    for n in range(3):
        ledger.link(ended(f"ok{n}", turn(n), State.COMPLETED), now=float(n))
    ledger.link(ended("other-route", turn(9), route="anthropic"), now=3.0)  # cut, elsewhere
    ledger.link(ended("ok3", turn(3), State.COMPLETED), now=4.0)
    assert calls == [turn(9)]  # the cut one only
    assert ledger.indexed == 4
    ledger.link(ended("cut", turn(4)), now=5.0)  # now a stream of this route can be linked
    ledger.link(ended("ok5", turn(5), State.COMPLETED), now=6.0)
    assert calls == [turn(9), turn(4), turn(5)]


def test_an_undigested_stream_hides_nothing_that_was_kept_after_it() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("ok", turn(0), State.COMPLETED), now=0.0)  # kept without keys
    ledger.link(ended("cut", turn(0)), now=1.0)  # the same body, cut: a retry of nothing
    assert of(ledger.link(ended("again", turn(0)), now=2.0)) == ("cut", "same_body")


# The walk the index replaces, as a model: every stream kept with all its keys.


class Walk:
    def __init__(self, streams: int, seconds: float) -> None:
        self.streams, self.seconds = streams, seconds
        self.kept: OrderedDict[str, tuple[str, State, BodyKeys, float]] = OrderedDict()

    def link(self, e: Ended, keys: BodyKeys, now: float) -> tuple[str, str] | None:
        while self.kept and next(iter(self.kept.values()))[3] < now - self.seconds:
            self.kept.popitem(last=False)
        found = None
        for rid, (route, state, kept, _) in reversed(self.kept.items()):
            how = linked_by(kept, keys) if route == e.route else None
            if how is not None:
                found = (rid, str(how)) if state in RETRIED_STATES else None
                break
        self.kept.pop(e.request_id, None)
        self.kept[e.request_id] = (str(e.route), e.state, keys, now)
        while len(self.kept) > self.streams:
            self.kept.popitem(last=False)
        return found


def test_the_index_links_as_a_walk_over_every_kept_stream_does() -> None:
    rng = random.Random(32)
    shapes: list[tuple[bytes, BodyKeys | None]] = []
    for q in range(3):
        body: dict[str, Any] = {"model": "m", "input": f"q{q}", "client_metadata": {"turn_id": "t"}}
        if q == 2:  # no turn id: linked by its other keys only
            del body["client_metadata"]
        for stream in (None, True, False, {"include_usage": True}):
            if isinstance(stream, dict):  # streamed, with other options
                shaped = {**body, "stream": True, "stream_options": stream}
            else:
                shaped = body if stream is None else {**body, "stream": stream}
            for order in (shaped, dict(reversed(shaped.items()))):
                shapes.append((orjson.dumps(order), None))
        message = orjson.dumps({"type": "response.create", **body})
        shapes.append((b"", body_keys("GET", PATH, message, websocket=True)))
    states = [State.COMPLETED, State.COMPLETED, State.INTERRUPTED, State.FAILED]
    for _ in range(20):
        ledger, walk = Ledger(LedgerLimits(streams=5, seconds=30)), Walk(5, 30)
        now = 0.0
        for n in range(60):
            now += rng.choice([1.0, 1.0, 1.0, 40.0])
            data, keys = rng.choice(shapes)
            rid = f"q{rng.randrange(n + 1) if rng.random() < 0.1 else n}"  # some kept again
            e = ended(rid, data, rng.choice(states), rng.choice(["a", "a", "b"]), keys)
            full = keys or body_keys(e.method, e.path, e.body)
            assert of(ledger.link(e, now)) == walk.link(e, full, now)
            assert len(ledger) == len(walk.kept) and ledger.indexed <= 4 * len(ledger)
