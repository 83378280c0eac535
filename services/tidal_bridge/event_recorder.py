"""Events off the bind path, as client-go's EventBroadcaster writes them:
`record` only queues (never awaits the API server), `run` writes the queue
behind the binds with a few requests in flight.

- **Bounded**: at most `max_queued` events wait (client-go's
  `maxQueuedEvents`, 1000); one more is dropped and counted (`dropped`),
  as the broadcaster drops when its channel is full: an Event is worth
  less than the next Binding.
- **Aggregated**: an event of the same (object uid, reason, message) as one
  still queued is not queued twice: the queued one counts it (`count`),
  as the correlator counts a repeat on the event already recorded.
- **Rate-limited per object**: each object's events go through its token
  bucket (`event_budget.EventBudget`, client-go's spam filter) when written.
- Best effort, as before: a refusal is logged (pod_status.create_pod_event);
  `flush` writes what is queued at stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from tidal_clock import Clock, wall_clock

from .event_budget import EventBudget
from .kube import Kube
from .pod_status import create_pod_event

log = logging.getLogger(__name__)
MAX_QUEUED = 1000  # client-go's maxQueuedEvents
WRITERS = 4  # events written side by side


class EventRecorder:
    def __init__(self, kube: Kube, *, budget: EventBudget | None = None, clock: Clock = wall_clock,
                 max_queued: int = MAX_QUEUED, writers: int = WRITERS, log: logging.Logger = log) -> None:
        self.kube, self.clock, self.log = kube, clock, log
        self.budget = budget or EventBudget()
        self.max_queued, self.writers = max_queued, writers
        # (uid, reason, message) -> [pod, kind, count]
        self._queued: OrderedDict[tuple[str, str, str], list[Any]] = OrderedDict()
        self._wake = asyncio.Event()
        self.dropped = 0  # events not queued: the queue was full
        self.limited = 0  # events not written: their object's budget was spent

    def record(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Normal") -> None:
        """Queue an Event on `pod`; never waits."""
        key = ((pod.get("metadata") or {}).get("uid") or "", reason, message)
        queued = self._queued.get(key)
        if queued is not None:
            queued[2] += 1
            return
        if len(self._queued) >= self.max_queued:
            self.dropped += 1
            return
        self._queued[key] = [pod, kind, 1]
        self._wake.set()

    @property
    def backlog(self) -> int:
        """Events queued, not yet written."""
        return len(self._queued)

    async def run(self) -> None:
        """Write what `record` queued, oldest first, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write every queued event, `writers` at a time."""
        async def writer() -> None:
            while self._queued:
                await self._write(*self._queued.popitem(last=False))

        await asyncio.gather(*(writer() for _ in range(min(self.writers, len(self._queued)))))

    async def _write(self, key: tuple[str, str, str], queued: list[Any]) -> None:
        pod, kind, count = queued
        meta = pod.get("metadata") or {}
        if not self.budget.allow(f"{meta.get('namespace')}/{meta.get('name')}", self.clock()):
            self.limited += 1
            return
        await create_pod_event(self.kube, pod, key[1], key[2], kind, log=self.log, clock=self.clock, count=count)
