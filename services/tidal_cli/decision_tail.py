"""Finding the decision that counts for one pod on Kafka, which has no key
index: the decision log is one partition, read backwards from its end a
window at a time (`tidal_bus.kafka_tail`), and so is the partition of
`pod.lifecycle` that holds the pod's key. The work is the events after the
pod's latest decision (and after its latest event), never the log before
them; `scan_limit` bounds each read, and reaching it the lookup says so.

The answer is `decision_lookup`'s (the NATS index's) by the rule of
`tidal_schemas.fence`, applied to what was read (`counts`), and trusting
the protocol for what was not: a leader decides only once it has read its
own fence back as valid, and a deposed one stops once it reads the fence
that deposed it, a few events later. So a decision under (epoch e,
leader L) does not count when a higher epoch's fence, or a decision under
a higher epoch (its leader fenced first), is read before it; it counts when
L's fence is read before it as the first claim of epoch e, or when
`margin` events before it were read with no higher epoch; an unfenced one
(epoch 0) counts when nothing fenced is read before it and the part read
holds nothing fenced at all (no scheduler fences there: a single one, a
tool), or `margin` events before it were read, or the log's start.

A bound pod's own event names the decision it was bound by: that one is
looked for (the latest that counts when it aged out of the log)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tidal_schemas import PlacementDecision, PodLifecycle, SchemaError, pod_key
from tidal_schemas.pod import HOLDING_PHASES
from tidal_schemas.streams import partition_for, stream

from .decision_lookup import DECISIONS, Found


FENCE_MARGIN = 256  # events read before a decision with no higher epoch: its leader was not deposed there
CLOCK_SLACK = timedelta(seconds=5)  # records carry their producer's clock: the bridge's may run behind placement's


@dataclass(frozen=True)
class Seen:
    """A fence, or a decision under a fence, read at `position`."""

    position: int
    epoch: int
    leader: str
    fence: bool = False


def counts(decision: PlacementDecision, position: int, seen: list[Seen], *, read_back: int, at_start: bool,
           fenced_log: bool, margin: int = FENCE_MARGIN) -> bool | None:
    """Whether `decision`, at `position`, counts by what was read of the log
    (see the module docstring); None when only more of it can tell.
    `read_back`: positions read before it; `at_start`: back to the log's
    first; `fenced_log`: something fenced was read, anywhere."""
    before = [s for s in seen if s.position < position and s.epoch > 0]
    if any(s.epoch > decision.epoch for s in before):
        return False  # deposed (or, unfenced, after a fence): a higher epoch held the log before it
    if decision.epoch > 0:
        claims = sorted((s for s in before if s.fence and s.epoch == decision.epoch), key=lambda s: s.position)
        if claims and claims[0].leader == decision.leader:
            return True  # its leader's fence, the first claim of its epoch
        if claims and any(c.leader == decision.leader for c in claims):
            return False  # another leader claimed its epoch first
    elif not fenced_log:
        return True
    if at_start:
        return decision.epoch == 0  # the whole log read: a fenced decision without its fence never counts
    return True if read_back >= margin else None


class TailLookup:
    """The latest decision that counts for `namespace/name` in `cluster`, on Kafka."""

    def __init__(self, bus, cluster: str, namespace: str, name: str, scan_limit: int = 0, *,
                 margin: int = FENCE_MARGIN, slack: timedelta = CLOCK_SLACK) -> None:
        self.bus, self.cluster, self.key = bus, cluster, pod_key(namespace, name)
        self.namespace, self.name, self.scan_limit, self.margin = namespace, name, scan_limit, margin
        self.slack = slack
        self.found = Found()
        self.scanned = 0  # decision log positions looked at, both scans counted (as decision_lookup's)
        self.records = 0  # records the broker handed over, every read's

    async def find(self) -> Found:
        found = self.found
        found.pod, stored_at = await self._own_event()
        pod, wanted, last = found.pod, None, None
        if pod is not None and pod.phase in HOLDING_PHASES and pod.decision_id:
            wanted = pod.decision_id
            if stored_at is not None:  # bound after its decision: the decisions stored since are not read
                last = await self._tail(DECISIONS).position_at(stored_at + self.slack)
        found.decision = await self._scan(wanted, last)
        if found.decision is None and wanted is not None and found.complete:
            found.decision = await self._scan(None)  # its decision aged out: the latest
        return found

    def _tail(self, stream_name: str):
        from tidal_bus.kafka_tail import PartitionTail

        partition = partition_for(self.key, stream(stream_name).partitions)
        return PartitionTail(self.bus, stream_name, partition, cluster=self.cluster)

    async def _own_event(self) -> tuple[PodLifecycle | None, datetime | None]:
        """The pod's latest `pod.lifecycle` event and when it was sent, from
        its partition's end back."""
        tail = self._tail("pod.lifecycle")
        try:
            async for window in tail.windows(self.scan_limit):
                self.found.read += len(window.reads)
                for raw, event in reversed(window.reads):
                    if raw.key == self.key and not isinstance(event, SchemaError):
                        return event.payload, raw.stored_at
        finally:
            self.records += tail.records
        return None, None

    async def _scan(self, wanted: str | None, last: int | None = None) -> PlacementDecision | None:
        """Back from the log's end (or position `last`): the pod's latest
        decision that counts (with `wanted`, only that decision id)."""
        limit = self.scan_limit - self.scanned if self.scan_limit else 0
        if self.scan_limit and limit <= 0:
            self.found.complete = False
            return None
        tail = self._tail(DECISIONS)
        seen: list[Seen] = []
        candidates: list[tuple[int, PlacementDecision]] = []  # newest first, not yet known to count or not
        fenced_log, looked, at_start, low = False, 0, False, 0
        try:
            async for window in tail.windows(limit, last):
                self.found.read += len(window.reads)
                looked += window.high - window.low + 1
                self.scanned += window.high - window.low + 1
                at_start, low = window.at_start, window.low
                for raw, event in reversed(window.reads):
                    if isinstance(event, SchemaError):
                        continue
                    for d in reversed(event.payload.items):
                        if d.epoch > 0:
                            fenced_log = True
                            seen.append(Seen(raw.position, d.epoch, d.leader, d.outcome == "fence"))
                        if d.outcome != "fence" and (d.namespace, d.name) == (self.namespace, self.name) \
                                and (wanted is None or d.decision_id == wanted):
                            candidates.append((raw.position, d))
                while candidates:
                    position, d = candidates[0]
                    verdict = counts(d, position, seen, read_back=position - low, at_start=at_start,
                                     fenced_log=fenced_log, margin=self.margin)
                    if verdict is None:
                        break
                    if verdict:
                        return d
                    candidates.pop(0)
        finally:
            self.records += tail.records
        if not at_start and self.scan_limit and looked >= limit:
            self.found.complete = False
        return None
