"""The pods holding resources on each node, kept by node: oversell reads a
node's pods on every sample of that node (500 a second at 5,000 nodes), so
finding them must not cost a pass over every pod of the cluster.

A pod is kept as what the oversell policy and eviction read of it
(`HeldPod`), not as its event: a cluster's running pods are all kept, and
a decoded `PodLifecycle` is about 6 KB (`bench/cluster_pods.py`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime

from tidal_schemas import HOLDING_PHASES, PodLifecycle


@dataclass(frozen=True, slots=True)
class HeldPod:
    """A pod holding resources on a node, as oversell reads it: its
    requests (the allocatable), start (warm-up), QoS (the bounded policy's
    LS pods), and what orders evictions."""

    key: str
    node: str
    cpu_milli: int
    memory_mib: int
    started_at: datetime | None
    created_at: datetime
    qos: str
    priority: int
    evictable: bool
    system_critical: bool

    @staticmethod
    def of(pod: PodLifecycle) -> "HeldPod":
        # node names and QoS classes each kept once, however many pods name them
        return HeldPod(pod.event_key(), sys.intern(pod.node or ""), pod.requests.cpu_milli, pod.requests.memory_mib,
                       pod.started_at, pod.created_at, sys.intern(pod.qos), pod.priority, pod.evictable,
                       pod.system_critical)

    def event_key(self) -> str:
        return self.key


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
            kept = pods[key] = HeldPod.of(pod)
            self._on.setdefault((cluster, kept.node), {})[key] = kept
        if not pods:
            del self._held[cluster]

    def on(self, cluster: str, node: str) -> list[HeldPod]:
        """The pods holding resources on `node`, by pod key."""
        held = self._on.get((cluster, node), {})
        return [held[key] for key in sorted(held)]

    def __len__(self) -> int:
        return sum(len(pods) for pods in self._held.values())
