"""The pods holding resources on each node, kept by node: oversell reads a
node's pods on every sample of that node (500 a second at 5,000 nodes), so
finding them must not cost a pass over every pod of the cluster.

A pod is kept as what the oversell policy and eviction read of it
(`HeldPod`), not as its event: a cluster's running pods are all kept, and
a decoded `PodLifecycle` is about 6 KB (`bench/cluster_pods.py`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import attrgetter

from tidal_runtime import SharedValues
from tidal_schemas import HOLDING_PHASES, PodLifecycle

_shapes = SharedValues()


@dataclass(frozen=True, slots=True)
class PodShape:
    """What the pods of one workload on one node share: one record for all
    of them. Its requests are the allocatable's, its QoS the bounded
    policy's LS pods, the rest what orders evictions."""

    node: str
    cpu_milli: int
    memory_mib: int
    qos: str
    priority: int
    evictable: bool
    system_critical: bool


def _shape(pod: PodLifecycle) -> PodShape:
    return _shapes.same(PodShape(sys.intern(pod.node or ""), pod.requests.cpu_milli, pod.requests.memory_mib,
                                 sys.intern(pod.qos), pod.priority, pod.evictable, pod.system_critical))


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)


@dataclass(frozen=True, slots=True)
class HeldPod:
    """A pod holding resources on a node, as oversell reads it: its shape's
    fields (read through it), its start (warm-up) and creation (evictions
    take the youngest first), kept as POSIX seconds (a datetime is twice
    the room, and event times all have their zone): 112 bytes a pod against
    264 with every field its own, of the 150,000 a 5,000-node cluster runs."""

    key: str
    started: float | None
    created: float
    shape: PodShape

    @staticmethod
    def of(pod: PodLifecycle, key: str | None = None) -> "HeldPod":
        """`key`: the pod's key object, as its tables keep it (one string a pod)."""
        return HeldPod(key or pod.event_key(), pod.started_at.timestamp() if pod.started_at else None,
                       pod.created_at.timestamp(), _shape(pod))

    started_at = property(lambda self: _moment(self.started))
    created_at = property(lambda self: _moment(self.created))

    def event_key(self) -> str:
        return self.key


for _field in PodShape.__slots__:
    setattr(HeldPod, _field, property(attrgetter(f"shape.{_field}")))


class PodsByNode:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, HeldPod]] = {}  # cluster -> pod key -> pod
        self._on: dict[tuple[str, str], dict[str, HeldPod]] = {}  # (cluster, node) -> pod key -> pod

    def apply(self, cluster: str, pod: PodLifecycle) -> None:
        """Keep the pod under its node while it holds resources there (a
        later event may move it, or end its hold)."""
        key = pod.event_key()
        pods = self._held.setdefault(cluster, {})
        was = pods.pop(key, None)
        if was is not None:
            held = self._on[cluster, was.node]
            del held[key]
            if not held:
                del self._on[cluster, was.node]
        if pod.phase in HOLDING_PHASES and pod.node:
            kept = pods[key] = HeldPod.of(pod, key)
            self._on.setdefault((cluster, kept.node), {})[key] = kept
        if not pods:
            del self._held[cluster]

    def on(self, cluster: str, node: str) -> list[HeldPod]:
        """The pods holding resources on `node`, by pod key."""
        held = self._on.get((cluster, node), {})
        return [held[key] for key in sorted(held)]

    def __len__(self) -> int:
        return sum(len(pods) for pods in self._held.values())
