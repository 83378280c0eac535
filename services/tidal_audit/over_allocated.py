"""Nothing held twice (§F 1): whenever a pod comes to hold something on a
node, what all pods there hold (Tidal's and foreign ones) is within what is
allocatable:

    Σ cpu, Σ memory        ≤ the node's allocatable (the oversold one when
                             oversell published one: the larger of the figure
                             in force at the pod's decision and the latest)
    Σ exclusive CPUs of NUMA node n ≤ n's allocatable CPUs
    Σ milli on a physical GPU and its virtual slices ≤ 1000
    Σ named milli + 1000 · floating GPUs ≤ 1000 · healthy GPUs of the node

A node whose topology is not known yet is not checked (nothing to compare to)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tidal_schemas import Envelope, NodeAllocatables, NodeTopology, PlacementDecisions, PodLifecycle, Resources

from .holdings import Holding, grew, holding
from .violation import Violation, cite

NAME = "over-allocated"


class OverAllocated:
    def __init__(self) -> None:
        self.topology: dict[str, NodeTopology] = {}
        self.oversold: dict[str, Resources] = {}
        self.at_decision: dict[str, Resources] = {}  # decision id -> allocatable then
        self.held: dict[str, Holding] = {}
        self.on_node: dict[str, set[str]] = defaultdict(set)

    def allocatable(self, node: str) -> Resources:
        return self.oversold.get(node) or self.topology[node].allocatable

    def feed(self, envelope: Envelope[Any]) -> list[Violation]:
        p = envelope.payload
        if isinstance(p, NodeTopology):
            self.topology[p.node] = p
        elif isinstance(p, NodeAllocatables):
            self.oversold.update((figures.node, figures.allocatable) for figures in p.items)
        elif isinstance(p, PlacementDecisions):
            self.at_decision.update((d.decision_id, self.allocatable(d.node)) for d in p.items
                                    if d.outcome == "placed" and d.node in self.topology)
        elif isinstance(p, PodLifecycle):
            return self._pod(p, envelope)
        return []

    def _pod(self, pod: PodLifecycle, envelope: Envelope[Any]) -> list[Violation]:
        key, before, after = pod.event_key(), self.held.get(pod.event_key()), holding(pod)
        if before is not None:
            self.on_node[before.node].discard(key)
        if after is None:
            self.held.pop(key, None)
            return []
        self.held[key] = after
        self.on_node[after.node].add(key)
        if not grew(before, after) or after.node not in self.topology:
            return []
        return [Violation(NAME, f"node {after.node}: {problem} once pod {key} holds its share", (cite(envelope, pod.phase),))
                for problem in self._problems(after, before if before is not None and before.node == after.node
                                              else None)]

    def _problems(self, new: Holding, old: Holding | None) -> list[str]:
        """What is over on `new`'s node, in what `new` took more of than `old` (what it held there before)."""
        old = old or Holding(new.node, 0, 0)
        node, topology = new.node, self.topology[new.node]
        pods = [self.held[k] for k in self.on_node[node]]
        limit = self.allocatable(node)
        then = self.at_decision.get(new.decision_id)
        problems = []
        for what, took, had, total, allowed in (
                ("cpu", new.cpu_milli, old.cpu_milli, sum(h.cpu_milli for h in pods),
                 max(limit.cpu_milli, then.cpu_milli if then else 0)),
                ("memory", new.memory_mib, old.memory_mib, sum(h.memory_mib for h in pods),
                 max(limit.memory_mib, then.memory_mib if then else 0))):
            if took > had and total > allowed:
                problems.append(f"{what} held {total} > allocatable {allowed}")
        numa_held: dict[int, int] = defaultdict(int)
        for h in pods:
            for numa, cpus in h.numa_cpus.items():
                numa_held[numa] += cpus
        for numa in topology.numa_nodes:
            if numa.allocatable_cpus is not None and numa_held.get(numa.id, 0) > numa.allocatable_cpus \
                    and new.numa_cpus.get(numa.id, 0) > old.numa_cpus.get(numa.id, 0):
                problems.append(f"NUMA {numa.id}: {numa_held[numa.id]} exclusive CPUs held > "
                                f"{numa.allocatable_cpus} allocatable")
        if new.gpus.items() <= old.gpus.items() and new.floating_gpus <= old.floating_gpus:
            return problems
        physical = {g.id: g.parent or g.id for g in topology.gpus}
        per_device: dict[str, int] = defaultdict(int)
        for h in pods:
            for gpu, milli in h.gpus.items():
                per_device[physical.get(gpu, gpu)] += milli
        for device, milli in sorted(per_device.items()):
            if device not in physical:
                problems.append(f"GPU {device} held ({milli} milli) but the node has no such GPU")
            elif milli > 1000:
                problems.append(f"GPU {device} (with its slices) held {milli} milli > 1000")
        healthy = sum(1 for g in topology.gpus if g.healthy and not g.parent)
        total = sum(per_device.values()) + 1000 * sum(h.floating_gpus for h in pods)
        if total > 1000 * healthy:
            problems.append(f"GPUs held {total} milli > {healthy} healthy GPUs")
        return problems
