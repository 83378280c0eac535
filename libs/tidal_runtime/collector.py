"""Python's cyclic garbage collector, set for a process that holds a large
state for long: a service, or a benchmark's stand-in for the cluster.

Python collects its oldest generation whenever the objects that reached it
have grown by a quarter since the last time. A service builds its state
from events (placement's pods and nodes, oversell's views), so it meets that
rule again and again as it grows, and every pass walks every object it
holds. In a 20,000-pod burst on 5,000 nodes the collector took 13 % of
placement's CPU and 25 % of oversell's, mostly in those passes, in pauses
of up to 0.6 s (README, "Load and horizontal scale"). Here the oldest
generation is collected only by `collect_periodically`, every
`full_every_s`, and the youngest after 10,000 allocations rather than 700,
so fewer objects are walked before they die of their own.

What the collector is for, cycles of objects no longer used, keeps: young
ones are found as before, and those that reached the oldest generation wait
at most `full_every_s` (`tests/test_collector.py`). An event's way through
the bus makes none (`tests/test_bus_output_window.py`)."""

from __future__ import annotations

import asyncio
import gc
import logging

from tidal_clock import elapsed

YOUNG_THRESHOLD = 10_000
NEVER = 2**31 - 1  # the collector's thresholds are C ints

log = logging.getLogger(__name__)


def collect_oldest_only_when_asked() -> None:
    """Set this process's collector as the module says. Process-wide:
    called by a process's entry point, never by a library or a test."""
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, NEVER)


async def collect_periodically(full_every_s: float) -> None:
    """Collect every generation every `full_every_s` seconds, until cancelled."""
    while True:
        await asyncio.sleep(full_every_s)
        started = elapsed()
        found = gc.collect()
        log.debug("full collection: %d unreachable objects in %.0f ms", found, (elapsed() - started) * 1e3)
