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
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from operator import attrgetter
from types import MappingProxyType

from tidal_runtime import SharedValues, packed_id, read_as_text
from tidal_schemas import Gpu, GpuAsk, GpuShare, PlacementDecision, PodLifecycle, Resources, pod_key

_share = SharedValues().get  # the parts that repeat across pods, each kept once


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
    """The fields of a pod that the pods of one workload share (whose it is,
    what it asks and how it runs; not where, nor which pod): one record for
    every pod with the same."""

    namespace: str
    requests: Resources
    gpu: GpuAsk
    tenant: str
    user: str
    exclusive_cpus: bool
    cpu_policy: str | None
    qos: str
    priority: int
    system_critical: bool
    invalid_reason: str | None
    foreign: bool


def _traits(pod: PodLifecycle) -> PodTraits:
    requests, gpu = _requests(pod.requests), _gpu_ask(pod.gpu)
    named = (_name(pod.namespace), _name(pod.tenant), _name(pod.user), pod.exclusive_cpus, pod.cpu_policy,
             _name(pod.qos), pod.priority, pod.system_critical, pod.invalid_reason, pod.foreign)
    # the shared parts by identity (a GPU ask is no key): alive while this entry holds them in its value
    return _share(("traits", id(requests), id(gpu), *named),
                  lambda: PodTraits(named[0], requests, gpu, *named[1:]))


NOT_KEPT = 0.0  # the creation time of a pod past pending: one float for all


@dataclass(frozen=True, slots=True)
class KeptPod:
    """A pod event as placement keeps it: every field placement reads (those
    in `traits` read through it, under the event's names)."""

    packed_uid: int | str  # `packed_id`: read as `uid`
    phase: str
    node: str | None
    # POSIX seconds (a datetime is twice the room; event times all have their zone). Only
    # the queue reads it, so a pod past pending keeps none: 24 bytes less a running pod.
    created: float
    numa_cpus: Mapping[int, int]
    gpus: tuple[GpuShare, ...]
    packed_decision_id: int | str  # `packed_id`: read as `decision_id`
    traits: PodTraits  # one slot for twelve: 88 bytes less a pod, of the 150,000 a 5,000-node cluster runs
    key: str  # one string for every table keyed by this pod

    @staticmethod
    def of(pod: PodLifecycle | KeptPod, key: str | None = None) -> KeptPod:
        """`key`: the pod's key object, as kept already (else made)."""
        if isinstance(pod, KeptPod):
            return pod
        return KeptPod(
            packed_uid=packed_id(pod.uid), phase=_name(pod.phase), node=_name(pod.node),
            created=pod.created_at.timestamp() if pod.phase == "pending" else NOT_KEPT,
            numa_cpus=_numa_cpus(pod.numa_cpus), gpus=_gpu_shares(pod.gpus),
            packed_decision_id=packed_id(pod.decision_id), traits=_traits(pod), key=key or pod_key(pod.namespace, pod.name))

    def bound_to(self, node: str) -> KeptPod:
        """The pod as bound to `node`, by a decision it does not name."""
        return replace(self, phase="bound", node=_name(node), created=NOT_KEPT, packed_decision_id="")

    uid = read_as_text("packed_uid")
    decision_id = read_as_text("packed_decision_id")

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created, timezone.utc)

    @property
    def name(self) -> str:  # the key holds it: one string less per pod
        return self.key[len(self.namespace) + 1:]

    def event_key(self) -> str:
        return self.key


for _trait in PodTraits.__slots__:  # read through the pod, under the event's names
    setattr(KeptPod, _trait, property(attrgetter(f"traits.{_trait}")))

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

    packed_decision_id: int | str  # `packed_id`s, read as `decision_id` and `uid`: a pod Tidal placed
    packed_uid: int | str  # keeps its decision until its bind, 150,000 at once in a burst that size
    node: str | None
    requests: Resources
    numa_cpus: Mapping[int, int]
    numa_nodes: tuple[int, ...]
    gpus: tuple[GpuShare, ...]
    epoch: int
    leader: str

    uid = read_as_text("packed_uid")
    decision_id = read_as_text("packed_decision_id")

    @staticmethod
    def of(d: PlacementDecision) -> KeptDecision:
        return KeptDecision(
            packed_decision_id=packed_id(d.decision_id), packed_uid=packed_id(d.uid), node=_name(d.node),
            requests=_requests(d.requests),
            numa_cpus=_numa_cpus(d.numa_cpus), numa_nodes=_share(("nodes", *d.numa_nodes), lambda: tuple(d.numa_nodes)),
            gpus=_gpu_shares(d.gpus), epoch=d.epoch, leader=_name(d.leader))
