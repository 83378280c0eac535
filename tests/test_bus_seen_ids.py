"""A consumer's memory of the events it handled (`tidal_bus.SeenIds`): ids
handled lately, in two generations swapped by time or by count, never more
than `capacity`, an id told apart by its whole key, and the memory it takes
per id bounded."""

from __future__ import annotations

import tracemalloc

from tidal_bus import SeenIds
from tidal_bus.intake import dedupe_key


class Clock:
    """The reader's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_id_is_remembered_for_half_the_horizon_at_least_and_the_whole_at_most():
    clock = Clock()
    seen = SeenIds(horizon_s=120.0, clock=clock)
    seen.add("c/k/1")
    clock.now += 59.0
    assert "c/k/1" in seen
    clock.now += 2.0  # the generations swap: 1 is in the older one
    seen.add("c/k/2")
    assert "c/k/1" in seen and "c/k/2" in seen
    clock.now += 61.0  # swapped again: 1 forgotten, 2 kept
    assert "c/k/1" not in seen and "c/k/2" in seen
    clock.now += 500.0  # idle past the horizon: nothing kept
    assert "c/k/2" not in seen and len(seen) == 0


def test_a_busy_reader_keeps_at_most_its_capacity_the_oldest_forgotten_first():
    seen = SeenIds(capacity=4, clock=Clock())
    for i in range(2):
        seen.add(f"c/k/{i}")
    seen.add("c/k/0")  # again: kept once
    assert len(seen) == 2
    for i in range(2, 5):
        seen.add(f"c/k/{i}")
    assert len(seen) <= 4 and "c/k/0" not in seen and "c/k/1" not in seen
    assert all(f"c/k/{i}" in seen for i in (2, 3, 4))


def test_an_id_is_told_apart_by_its_whole_key():
    seen = SeenIds()
    seen.add(dedupe_key("c1", "ns/a", "id-1"))
    assert dedupe_key("c1", "ns/a", "id-1") in seen
    assert dedupe_key("c1", "ns/b", "id-1") not in seen and dedupe_key("c2", "ns/a", "id-1") not in seen


def key(i: int) -> str:  # made afresh, as each event's is
    return dedupe_key("cluster", f"node-{i:05d}", f"0b9a6c1e-1b1f-4e8e-9d1c-{i:012d}")


def test_a_full_memory_takes_under_a_hundred_and_sixty_bytes_per_id():
    # an ordered dict of the keys took about 210 bytes per id
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        seen = SeenIds(capacity=40_000, clock=Clock())
        for i in range(39_999):
            seen.add(key(i))
        per_id = (tracemalloc.get_traced_memory()[0] - before) / len(seen)
    finally:
        tracemalloc.stop()
    assert len(seen) == 39_999 and key(0) in seen and key(39_998) in seen
    assert per_id < 160, f"{per_id:.0f} bytes per id"
