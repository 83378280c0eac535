"""A node's sample read before its inventory.

A stage that needs a node's topology to handle its samples (oversell's
allocatable, remediation's NUMA layout) reads `node.topology` and
`node.metrics` with two consumers, which run apart: a node's first sample
can be handled before its topology, which the agent published first. It
used to be dropped, unanswered: oversell's allocatable for it never came,
and whoever waited for that answer (the simulator's settling, placement's
view of the node) waited in vain.

So a sample of a node without its inventory waits for it, up to `wait_s`,
the first time. A node still without one after that is a missing
inventory, not a race: its samples are refused at once (`HandlerError`,
not retriable: the consumer dead-letters each with the reason) until its
topology comes, so one bad node costs the stream one wait, not one per
sample.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable

from tidal_bus.errors import HandlerError


class InventoryGate:
    """Waits for node inventories; `arrived(key)` when one is read."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self._waiting: dict[Hashable, asyncio.Event] = {}
        self._missing: set[Hashable] = set()  # waited for once in vain; refused at once until it comes

    def arrived(self, key: Hashable) -> None:
        self._missing.discard(key)
        event = self._waiting.pop(key, None)
        if event is not None:
            event.set()

    async def admit(self, key: Hashable, known: Callable[[], bool], what: str) -> None:
        """Return once `known()` (the inventory of `key` is read); HandlerError
        naming `what` when it is not within `wait_s` (or was not before)."""
        if known():
            return
        if key not in self._missing:
            event = self._waiting.setdefault(key, asyncio.Event())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), self.wait_s)
            if known():
                return
            self._waiting.pop(key, None)
            self._missing.add(key)
        raise HandlerError(f"{what}: no node.topology read for it within {self.wait_s:g}s of its first sample; "
                           "the node agent's inventory is missing", retriable=False)
