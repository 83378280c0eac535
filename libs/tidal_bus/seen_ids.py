"""What a consumer remembers of the events it handled, to skip duplicates."""

from __future__ import annotations

from collections.abc import Callable
from hashlib import blake2b

from tidal_clock import elapsed


class SeenIds:
    """The events handled lately, by `intake.dedupe_key`: a duplicate (a
    redelivery after a lost ack, one `ack_wait_s`; an event a retried
    publish stored twice) comes within seconds of the first.

    Ids are kept in two generations, the current one and the one before,
    swapped every `horizon_s / 2` seconds of this reader's clock or when the
    current one holds `capacity / 2`: an id is remembered for at least
    `horizon_s / 2` seconds unless the reader handles more than `capacity / 2`
    events in that time, and never more than `capacity` are kept. A count
    alone kept 200,000 per consumer, reached within minutes at 5,000 nodes'
    samples (about 40 MB for each per-node stream a service reads, the keys
    in an ordered dict); at 500 samples a second this keeps 30,000 to
    60,000, about 150 bytes each. An id is kept as a 96-bit digest of its
    key (a 48-byte object where 16 bytes took 64): two of 200,000 keys
    sharing one, which would drop an event, has odds below 1 in 10^18."""

    def __init__(self, capacity: int = 200_000, horizon_s: float = 120.0,
                 clock: Callable[[], float] = elapsed) -> None:
        self._current: set[bytes] = set()
        self._previous: set[bytes] = set()
        self._capacity, self._horizon_s, self._clock = capacity, horizon_s, clock
        self._swapped = clock()

    @staticmethod
    def _digest(event_id: str) -> bytes:
        return blake2b(event_id.encode(), digest_size=12).digest()

    def _age(self) -> None:
        now = self._clock()
        if now - self._swapped >= self._horizon_s:
            self._previous, self._current, self._swapped = set(), set(), now
        elif now - self._swapped >= self._horizon_s / 2 or 2 * len(self._current) >= self._capacity:
            self._previous, self._current, self._swapped = self._current, set(), now

    def __contains__(self, event_id: str) -> bool:
        self._age()
        digest = self._digest(event_id)
        return digest in self._current or digest in self._previous

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)

    def add(self, event_id: str) -> None:
        self._age()
        digest = self._digest(event_id)
        if digest not in self._previous:
            self._current.add(digest)
