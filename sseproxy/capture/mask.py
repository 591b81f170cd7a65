"""A captured body's credentials masked while it streams to disk, piece by piece.

Whole-body masking found a value split across two chunks because it saw the body at once. Here
each piece is masked together with the bytes held back from the one before: only the shortest
end that could still begin a credential (at most the longest value less one byte) is held, so
a value split anywhere is still whole when it is looked for, and a body whose end cannot begin
one (an SSE event's blank line) is on disk entirely. Every place any value occurs is masked
with as many `*` (offsets stay exact). A compressed body cannot be masked in place: it is
searched decoded as it comes and kept aside; the caller writes it only at the end, when no
credential was found (today's rule, `masked_body`)."""

from __future__ import annotations

from sseproxy.core.encoding import BodyDecoder, ContentDecodingError
from sseproxy.observe.redact import Secrets

# Decoded bytes of one compressed capture searched for credentials; beyond, it is withheld.
MAX_DECODED_CHECK_BYTES = 64 * 1024 * 1024
# Places a credential's first byte is compared at in a held end, per value, before the whole
# end (the longest value less one byte) is held instead: bounded work on a hostile body.
MAX_PREFIX_CANDIDATES = 16


def held_length(window: bytes, raws: tuple[bytes, ...]) -> int:
    """How many bytes at the end of `window` could begin one of `raws` (longest first): they
    wait for the next piece. Bounded work: past MAX_PREFIX_CANDIDATES places per value, the
    whole end that could (the longest value less one byte) is held."""
    n, hold = len(window), 0
    for raw in raws:
        most = min(len(raw) - 1, n)
        if most <= hold:
            break  # the values are longest first: no later one can end longer
        first = raw[:1]
        start, checked = window.find(first, n - most), 0
        while start != -1 and n - start > hold:
            checked += 1
            if checked > MAX_PREFIX_CANDIDATES:
                return min(len(raws[0]) - 1, n)
            if raw.startswith(memoryview(window)[start:]):
                hold = n - start  # the earliest start that fits: the longest end
                break
            start = window.find(first, start + 1)
    return hold


class StreamMask:
    """Masks one body as it arrives (`feed`, then `end`); `deferred` when it is compressed and
    must be kept aside (`search`) until the end decides (`withheld`)."""

    __slots__ = (
        "_decoded",
        "_decoder",
        "_forced",
        "_held",
        "_longest",
        "_raws",
        "_searching",
        "_secrets",
        "_tail",
        "deferred",
        "encoding",
        "withheld",
    )

    def __init__(self, secrets: Secrets, encoding: str | None) -> None:
        self._secrets, self._raws = secrets, secrets.raw
        self._longest = max((len(r) for r in self._raws), default=0)
        self._held = b""  # raw bytes not yet written: they may begin a credential
        self._forced = 0  # of those, how many a value that began before them covers
        self._decoder: BodyDecoder | None = None
        self._decoded = 0
        self._tail = b""
        self._searching = False
        self.deferred = False
        self.withheld: str | None = None
        self.encoding = encoding if isinstance(encoding, str) else None
        if not self._raws:
            return  # nothing to mask: every body, compressed or not, goes as it came
        try:
            decoder = BodyDecoder(self.encoding)
        except ContentDecodingError as exc:
            self.deferred, self.withheld = True, f"cannot be searched for credentials: {exc}"
            return
        if not decoder.identity:
            self.deferred, self._decoder, self._searching = True, decoder, True

    @property
    def masking(self) -> bool:
        return bool(self._raws) and not self.deferred

    def feed(self, data: bytes) -> bytes:
        """The bytes to append to the body file now: `data` (after what was held) masked, less
        an end that could begin a credential."""
        if not self.masking:
            return data
        window = self._held + data if self._held else data
        cut = len(window) - held_length(window, self._raws)
        if not self._forced and not any(raw in window for raw in self._raws):
            self._held = window[cut:]  # the usual piece: nothing to mask, nothing copied
            return window[:cut] if cut < len(window) else window
        out = bytearray(window)
        reach = self._mask_into(window, out, cut)
        self._held = window[cut:]
        self._forced = max(0, reach - cut)
        return bytes(out[:cut])

    def end(self, *, cut: bool) -> bytes:
        """The bytes still held, masked: the body ended (`cut`: at a cap, so a credential's
        first bytes at the very end are masked too)."""
        if not self.masking or not self._held:
            return b""
        window, self._held = self._held, b""
        out = bytearray(window)
        self._mask_into(window, out, len(window))
        # with `cut`, also what is left of a value cut at the very end (`Secrets.mask`'s rule)
        return self._secrets.mask(bytes(out), cut=True) if cut else bytes(out)

    def _mask_into(self, window: bytes, out: bytearray, cut: int) -> int:
        """Mask every occurrence of every value in `out` (and the held bytes an earlier value
        covered); returns how far the values that begin before `cut` reach. Each value is
        looked for in the bytes as they came, so values that overlap are all masked; one
        value's own occurrences are taken left to right without overlap, as `bytes.replace`
        takes them (linear work, whatever the body)."""
        if self._forced:
            out[: self._forced] = b"*" * self._forced
        reach = 0
        for raw in self._raws:
            size = len(raw)
            at = window.find(raw)
            while at != -1:
                out[at : at + size] = b"*" * size
                if at < cut:
                    reach = max(reach, at + size)
                at = window.find(raw, at + size)
        return reach

    def search(self, data: bytes) -> None:
        """A compressed piece, decoded and searched (with the end of the last piece); sets
        `withheld` when it holds a credential or decodes to more than can be searched."""
        decoder = self._decoder
        if not self._searching or decoder is None:
            return
        keep = self._longest - 1
        try:
            piece = decoder.decode(data)
            while True:
                self._decoded += len(piece)
                if self._decoded > MAX_DECODED_CHECK_BYTES:
                    self._stop("decodes to more than can be searched for credentials")
                    return
                window = self._tail + piece
                if any(raw in window for raw in self._raws):
                    self._stop(f"{decoder.encoding} body holds a credential of the request")
                    return
                self._tail = window[-keep:] if keep else b""
                if not decoder.pending:
                    return
                piece = decoder.decode(b"")
        except ContentDecodingError:
            self._searching = False  # what did decode was searched; the rest is undecodable

    def _stop(self, why: str) -> None:
        self.withheld, self._searching, self._tail = why, False, b""
