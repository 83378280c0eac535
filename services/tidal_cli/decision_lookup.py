"""Finding the decision that counts for one pod in the decision log, from
the broker's index (`tidal_bus.keyed_read`, NATS) rather than the whole log:

1. the pod's own events, by its key: its last `pod.lifecycle` event (what
   it asked for; a bound pod names the decision it was bound by) and its
   `bind.result`s;
2. the fences, by theirs (a new leader publishes its fence alone in an
   event, so their one key finds each; a few per leader change): which
   (epoch, leader) counts at every position of the log (`fence.py`);
3. the decision itself. Decisions travel in batches keyed by their first
   pod, so a pod's key does not find them all: the log is scanned backwards
   in chunks from a known position — for a bound pod, the first decision
   stored after its bind result (its decision is just before); else the
   log's end — until the pod's latest decision that counts (a bound pod:
   the one it is bound by).

The work is the pod's own events, the fences, and the decisions between
that position and the pod's: not the log before them, however long.
`scan_limit` bounds the scan; reaching it, the lookup says so (`complete`
is False) rather than read on. Kafka has no index: its lookup reads the
log back from its end (`decision_tail`). The whole-log read,
`read_whole_log`, is the reference both are checked against."""

from __future__ import annotations

import bisect
from contextlib import aclosing
from dataclasses import dataclass, field

from tidal_bus import Bus, StartAt
from tidal_bus.keyed_read import bounds, position_at, read_key, read_span
from tidal_schemas import BindResult, PlacementDecision, PodLifecycle, SchemaError, pod_key
from tidal_schemas.fence import DecisionFence, fence_decision
from tidal_schemas.pod import HOLDING_PHASES

DECISIONS = "placement.decision"
FENCE_KEY = fence_decision(1, "-").event_key()
FIRST_CHUNK = 16
MAX_CHUNK = 4096


@dataclass
class Found:
    """The lookup's answer, and the messages it read from the bus."""

    decision: PlacementDecision | None = None
    pod: PodLifecycle | None = None
    read: int = 0
    complete: bool = True  # False: scan_limit reached before the log's start


@dataclass
class Fences:
    """The valid fences of the log, in order: positions and (epoch, leader)."""

    positions: list[int] = field(default_factory=list)
    holders: list[tuple[int, str]] = field(default_factory=list)

    def add(self, position: int, fence: PlacementDecision, rule: DecisionFence) -> None:
        if rule.admit(fence):
            self.positions.append(position)
            self.holders.append((fence.epoch, fence.leader))

    def counts(self, position: int, decision: PlacementDecision) -> bool:
        """Whether `decision`, at `position` of the log, counts: it carries
        the (epoch, leader) of the last valid fence before it ((0, "") before any)."""
        at = bisect.bisect_left(self.positions, position)
        return (decision.epoch, decision.leader) == (self.holders[at - 1] if at else (0, ""))


class DecisionLookup:
    """The latest decision that counts for `namespace/name` in `cluster`."""

    def __init__(self, bus: Bus, cluster: str, namespace: str, name: str, scan_limit: int = 0) -> None:
        self.bus, self.cluster, self.key = bus, cluster, pod_key(namespace, name)
        self.namespace, self.name = namespace, name
        self.scan_limit, self.scanned = scan_limit, 0  # 0: no limit; positions looked at, every scan counted
        self.found = Found()

    async def find(self) -> Found:
        found = self.found
        found.pod, binds = await self._own_events()
        fences = await self._fences()
        first, last = await bounds(self.bus, DECISIONS)
        start, wanted = last, None
        pod = found.pod
        if pod is not None and pod.phase in HOLDING_PHASES and pod.decision_id:
            wanted = pod.decision_id
            stored = binds.get(wanted)
            if stored is not None:
                after = await position_at(self.bus, DECISIONS, stored, cluster=self.cluster)
                start = last if after is None else after
        found.decision = await self._scan(fences, first, start, wanted)
        if found.decision is None and wanted is not None and found.complete:
            found.decision = await self._scan(fences, first, last, None)  # its decision aged out: the latest
        return found

    async def _own_events(self):
        pod, binds = None, {}
        async with aclosing(read_key(self.bus, "pod.lifecycle", self.key, cluster=self.cluster)) as events:
            async for _, event in events:
                self.found.read += 1
                if not isinstance(event, SchemaError):
                    pod = event.payload
        async with aclosing(read_key(self.bus, "bind.result", self.key, cluster=self.cluster)) as events:
            async for raw, event in events:
                self.found.read += 1
                if not isinstance(event, SchemaError) and isinstance(event.payload, BindResult) and event.payload.ok:
                    binds[event.payload.decision_id] = raw.stored_at
        return pod, binds

    async def _fences(self) -> Fences:
        fences, rule = Fences(), DecisionFence()
        async with aclosing(read_key(self.bus, DECISIONS, FENCE_KEY, cluster=self.cluster)) as events:
            async for raw, event in events:
                self.found.read += 1
                if isinstance(event, SchemaError):
                    continue
                for d in event.payload.items:
                    if d.outcome == "fence":
                        fences.add(raw.position, d, rule)
        return fences

    async def _scan(self, fences: Fences, first: int, start: int, wanted: str | None) -> PlacementDecision | None:
        """Backwards from position `start`: the pod's latest decision that
        counts (with `wanted`, only that decision id)."""
        high, chunk = start, FIRST_CHUNK
        while high >= first:
            if self.scan_limit and self.scanned >= self.scan_limit:
                self.found.complete = False
                return None
            if self.scan_limit:
                chunk = min(chunk, self.scan_limit - self.scanned)
            low = max(first, high - chunk + 1)
            batch = []
            async with aclosing(read_span(self.bus, DECISIONS, cluster=self.cluster, first=low, last=high)) as events:
                async for raw, event in events:
                    self.found.read += 1
                    if not isinstance(event, SchemaError):
                        batch.append((raw.position, event.payload.items))
            for position, items in reversed(batch):
                for d in reversed(items):
                    if (d.namespace, d.name) == (self.namespace, self.name) and d.outcome != "fence" \
                            and (wanted is None or d.decision_id == wanted) and fences.counts(position, d):
                        return d
            self.scanned += high - low + 1
            high, chunk = low - 1, min(chunk * 2, MAX_CHUNK)
        return None


async def read_whole_log(bus: Bus, cluster: str, namespace: str, name: str) -> Found:
    """The lookup without an index: every decision of the log from its
    start, then every pod event (a broker that cannot filter by key)."""
    fence, found = DecisionFence(), Found()
    async for _, event in bus.read(DECISIONS, StartAt.earliest()):
        found.read += 1
        if isinstance(event, SchemaError) or event.cluster != cluster:
            continue
        for d in event.payload.items:
            if fence.admit(d) and (d.namespace, d.name) == (namespace, name):
                found.decision = d
    if found.decision is not None:  # the pod's own event says what it asked for
        async for _, event in bus.read("pod.lifecycle", StartAt.earliest()):
            found.read += 1
            if not isinstance(event, SchemaError) and event.cluster == cluster \
                    and (event.payload.namespace, event.payload.name) == (namespace, name):
                found.pod = event.payload
    return found
