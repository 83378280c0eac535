"""What placement keeps of a pod event and of a placed decision, for every
pod it has seen: the fields it reads, in slotted objects.

A decoded `PodLifecycle` is about 6 KB (a pydantic model with its own
field dict and set of fields given, and the same again for each nested
model); placement keeps one per pod, 20,000 pending in a burst, and
memory was its limit (issue 19). These keep the same attribute names,
so the policy reads a kept pod as it reads the event, and the parts that
repeat across pods — request shapes, GPU asks and shares, NUMA counts,
tenant and user names — are shared, not copied.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from tidal_schemas import Gpu, GpuAsk, GpuShare, PlacementDecision, PodLifecycle, Resources, pod_key

SHARED_KEPT = 100_000  # distinct shared parts kept before starting afresh (bounds a hostile variety)
_shared: dict[tuple, Any] = {}


def _share(key: tuple, make) -> Any:
    found = _shared.get(key)
    if found is None:
        if len(_shared) >= SHARED_KEPT:
            _shared.clear()
        found = _shared[key] = make()
    return found


def _requests(r: Resources) -> Resources:
    return _share(("requests", r.cpu_milli, r.memory_mib, r.gpu_milli), lambda: r)


def _gpu_ask(ask: GpuAsk) -> GpuAsk:
    return _share(("ask", ask.count, ask.milli, tuple(ask.models), ask.kind, ask.group), lambda: ask)


def _gpu_shares(shares) -> tuple[GpuShare, ...]:
    return tuple(_share(("share", s.gpu, s.milli, s.model), lambda s=s: s) for s in shares)


def _numa_cpus(counts: Mapping[int, int]) -> Mapping[int, int]:
    # read-only: one mapping stands for every pod holding the same counts
    items = tuple(sorted(counts.items()))
    return _share(("numa", items), lambda: MappingProxyType(dict(items)))


def _name(text: str | None) -> str | None:
    return sys.intern(text) if text else text


@dataclass(frozen=True, slots=True)
class PodTraits:
    """The fields of a pod that most pods share (how it runs, not what it
    asks or where): one record for every pod with the same."""

    exclusive_cpus: bool
    cpu_policy: str | None
    qos: str
    priority: int
    system_critical: bool
    invalid_reason: str | None
    foreign: bool


def _traits(pod: PodLifecycle) -> PodTraits:
    values = (pod.exclusive_cpus, pod.cpu_policy, _name(pod.qos), pod.priority, pod.system_critical,
              pod.invalid_reason, pod.foreign)
    return _share(("traits", *values), lambda: PodTraits(*values))


@dataclass(frozen=True, slots=True)
class KeptPod:
    """A pod event as placement keeps it: every field placement reads (those
    in `traits` read through it, under the event's names)."""

    namespace: str
    uid: str
    phase: str
    node: str | None
    requests: Resources
    gpu: GpuAsk
    tenant: str
    user: str
    created_at: datetime
    numa_cpus: Mapping[int, int]
    gpus: tuple[GpuShare, ...]
    decision_id: str
    traits: PodTraits  # one slot for seven: 48 bytes less a pod, of the 150,000 a 5,000-node cluster runs
    key: str  # one string for every table keyed by this pod

    @staticmethod
    def of(pod: PodLifecycle | KeptPod) -> KeptPod:
        if isinstance(pod, KeptPod):
            return pod
        return KeptPod(
            namespace=_name(pod.namespace), uid=pod.uid, phase=_name(pod.phase),
            node=_name(pod.node), requests=_requests(pod.requests), gpu=_gpu_ask(pod.gpu),
            tenant=_name(pod.tenant), user=_name(pod.user), created_at=pod.created_at,
            numa_cpus=_numa_cpus(pod.numa_cpus), gpus=_gpu_shares(pod.gpus), decision_id=pod.decision_id,
            traits=_traits(pod), key=pod_key(pod.namespace, pod.name))

    exclusive_cpus = property(lambda self: self.traits.exclusive_cpus)
    cpu_policy = property(lambda self: self.traits.cpu_policy)
    qos = property(lambda self: self.traits.qos)
    priority = property(lambda self: self.traits.priority)
    system_critical = property(lambda self: self.traits.system_critical)
    invalid_reason = property(lambda self: self.traits.invalid_reason)
    foreign = property(lambda self: self.traits.foreign)

    @property
    def name(self) -> str:  # the key holds it: one string less per pod
        return self.key[len(self.namespace) + 1:]

    def event_key(self) -> str:
        return self.key


PodLike = PodLifecycle | KeptPod  # what the policy reads a pod from


@dataclass(frozen=True, slots=True)
class KeptGpu:
    """A node's GPU as placement keeps it for tenant grouping: a decoded
    `Gpu` is over 1 KB (its field dict and set of fields given), one per
    GPU of the cluster, 14,000 at 5,000 nodes."""

    id: str
    model: str
    kind: str
    healthy: bool

    @staticmethod
    def of(gpu: Gpu) -> KeptGpu:
        return KeptGpu(id=gpu.id, model=_name(gpu.model), kind=_name(gpu.kind), healthy=gpu.healthy)


@dataclass(frozen=True, slots=True)
class KeptDecision:
    """What a pod's record (keyed by the pod) keeps of a placed decision:
    what it books and whom it names. The explanation (chosen node's breakdown, runners-up,
    nodes filtered out, reason) is for the bridge and the metrics; kept
    for every pod placed it was most of placement's memory per pod."""

    decision_id: str
    uid: str
    node: str | None
    requests: Resources
    numa_cpus: Mapping[int, int]
    numa_nodes: tuple[int, ...]
    gpus: tuple[GpuShare, ...]
    epoch: int
    leader: str

    @staticmethod
    def of(d: PlacementDecision) -> KeptDecision:
        return KeptDecision(
            decision_id=d.decision_id, uid=d.uid, node=_name(d.node), requests=_requests(d.requests),
            numa_cpus=_numa_cpus(d.numa_cpus), numa_nodes=_share(("nodes", *d.numa_nodes), lambda: tuple(d.numa_nodes)),
            gpus=_gpu_shares(d.gpus), epoch=d.epoch, leader=_name(d.leader))
