"""Quotas hold at every instant (§F 4): whenever a Tidal pod comes to hold
something, its tenant's usage of each resource type with a limit is within
the limit. Usage is charged by placement's own rule
(`tidal_placement.tenancy.charge`: CPU, memory, each GPU share under its
model and under "gpu"); foreign pods are no tenant's."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tidal_placement.tenancy import charge
from tidal_schemas import Envelope, NodeTopology, PodLifecycle, TenantConfig

from .holdings import holding
from .violation import Violation, cite

NAME = "over-quota"


class OverQuota:
    def __init__(self) -> None:
        self.quota: dict[str, tuple[dict[str, int], Envelope[Any]]] = {}
        self.gpu_model: dict[tuple[str, str], str] = {}  # (node, GPU id) -> model
        self.charged: dict[str, tuple[str, dict[str, int]]] = {}  # pod -> (tenant, what it adds)
        self.usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def feed(self, envelope: Envelope[Any]) -> list[Violation]:
        p = envelope.payload
        if isinstance(p, TenantConfig):
            if p.deleted:
                self.quota.pop(p.tenant, None)
            else:
                self.quota[p.tenant] = (dict(p.quota), envelope)
        elif isinstance(p, NodeTopology):
            self.gpu_model.update({(p.node, g.id): g.model for g in p.gpus})
        elif isinstance(p, PodLifecycle) and not p.foreign:
            return self._pod(p, envelope)
        return []

    def _pod(self, pod: PodLifecycle, envelope: Envelope[Any]) -> list[Violation]:
        key = pod.event_key()
        before = self.charged.pop(key, None)
        if before is not None:
            for kind, amount in before[1].items():
                self.usage[before[0]][kind] -= amount
        now = holding(pod)
        if now is None:
            return []
        adds: dict[str, int] = {}
        charge(adds, pod, ((s.model or self.gpu_model.get((now.node, s.gpu), ""), s.milli) for s in pod.gpus))
        self.charged[key] = (pod.tenant, adds)
        for kind, amount in adds.items():
            self.usage[pod.tenant][kind] += amount
        limits = self.quota.get(pod.tenant)
        if limits is None or (before is not None and before[0] == pod.tenant
                              and all(adds.get(k, 0) <= before[1].get(k, 0) for k in adds)):
            return []
        used = self.usage[pod.tenant]
        return [Violation(NAME, f"tenant {pod.tenant} holds {used[kind]} {kind} > its quota {limit} once pod {key} "
                                "holds its share", (cite(limits[1], f"quota {kind} {limit}"), cite(envelope, pod.phase)))
                for kind, limit in sorted(limits[0].items()) if adds.get(kind) and used[kind] > limit]
