"""A consumer's memory of the events it handled (`tidal_bus.SeenIds`): the
most recent `capacity` ids, forgotten oldest first, an id added twice kept
once, and the memory it takes per id bounded."""

from __future__ import annotations

import tracemalloc

from tidal_bus import SeenIds
from tidal_bus.intake import dedupe_key


def test_the_most_recent_ids_are_remembered_and_the_oldest_forgotten_first():
    seen = SeenIds(capacity=3)
    for i in range(3):
        seen.add(f"c/k/{i}")
    seen.add("c/k/0")  # again: kept once, in its first place
    assert len(seen) == 3 and all(f"c/k/{i}" in seen for i in range(3))
    seen.add("c/k/3")
    assert "c/k/0" not in seen and all(f"c/k/{i}" in seen for i in (1, 2, 3)) and len(seen) == 3


def test_an_id_is_told_apart_by_its_whole_key():
    seen = SeenIds()
    seen.add(dedupe_key("c1", "ns/a", "id-1"))
    assert dedupe_key("c1", "ns/a", "id-1") in seen
    assert dedupe_key("c1", "ns/b", "id-1") not in seen and dedupe_key("c2", "ns/a", "id-1") not in seen


def key(i: int) -> str:  # made afresh, as each event's is
    return dedupe_key("cluster", f"node-{i:05d}", f"0b9a6c1e-1b1f-4e8e-9d1c-{i:012d}")


def test_a_full_memory_takes_about_a_hundred_bytes_per_id():
    # an ordered dict of the keys took about 210 bytes per id
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        seen = SeenIds(capacity=40_000)
        for i in range(50_000):
            seen.add(key(i))
        per_id = (tracemalloc.get_traced_memory()[0] - before) / len(seen)
    finally:
        tracemalloc.stop()
    assert len(seen) == 40_000 and key(49_999) in seen and key(9_999) not in seen and key(10_000) in seen
    assert per_id < 130, f"{per_id:.0f} bytes per id"
