"""The snapshot one remediation round works on, built from a node's
`NodeMetrics` and `NodeTopology` (SPEC §E).

Capacity of NUMA node m, in milli-CPU, is all its CPUs (reserved ones too),
because its load is the mean utilisation over all of them:

    capacity(m) = 1000 · |cpus(m)|

A pod is *on* NUMA node m when its `numa_nodes` include m (when the agent
left `numa_nodes` empty, they are read off the pod's cpuset). A pod spanning
several NUMA nodes has its usage u attributed in proportion to its CPUs
there — the kernel schedules its threads over its cpuset, so each CPU
carries about the same share:

    share(m) = u · |cpuset ∩ cpus(m)| / |cpuset ∩ cpus(numa_nodes)|

and evenly, share(m) = u / |numa_nodes|, when the cpuset says nothing about
those NUMA nodes (empty, i.e. the shared pool, or outside them).

A pod's cpuset is *exclusive* (its CPUs are nobody else's, so they are not
free for a move) when the caller says so — e.g. from `cpu.assignment`
events. Without that list: a cpuset is exclusive unless another pod has
the very same cpuset or it is every CPU of the node, reserved ones
included (the node agent's shared pool, as kubelet's) or not, since every
container in the shared pool is given the whole pool. The fallback
errs towards "taken", which can only forbid a move, never double-book CPUs.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from types import MappingProxyType

from tidal_schemas import NodeMetrics, NodeTopology, PodUsage

MILLI_PER_CPU = 1000


@dataclass(frozen=True)
class PodState:
    """One pod on the node as the policy sees it."""

    name: str
    cpu_milli: float
    qos: str
    cpuset: tuple[int, ...] = ()
    numa_nodes: tuple[int, ...] = ()
    frozen: bool = False
    exclusive: bool = False


@dataclass(frozen=True)
class NumaState:
    """One NUMA node: its CPUs and its measured load (None = not sampled)."""

    id: int
    cpus: tuple[int, ...]
    load: float | None

    @property
    def capacity_milli(self) -> float:
        """1000 · number of CPUs."""
        return float(MILLI_PER_CPU * len(self.cpus))


@dataclass(frozen=True)
class NodeState:
    """A node's NUMA nodes, pods, reserved CPUs and CPU → core map."""

    node: str
    numa: Mapping[int, NumaState]
    pods: tuple[PodState, ...]
    reserved_cpus: frozenset[int] = frozenset()
    cpu_core: Mapping[int, int] = field(default_factory=dict)
    sampled_since: datetime | None = None  # the start of the window the pods' usage was measured over

    def pod(self, name: str) -> PodState | None:
        """The pod called `name`, if the node runs it."""
        return next((p for p in self.pods if p.name == name), None)

    def cpu_numa(self) -> dict[int, int]:
        """CPU id → NUMA id."""
        return {cpu: numa.id for numa in self.numa.values() for cpu in numa.cpus}


def numa_shares(pod: PodState, state: NodeState) -> dict[int, float]:
    """The pod's usage (milli-CPU) attributed to each NUMA node it is on,
    share(m) = u · |cpuset ∩ cpus(m)| / |cpuset ∩ cpus(numa_nodes)|, or an
    even split u / |numa_nodes| when the cpuset does not cover those NUMA
    nodes. NUMA nodes the topology does not know get no entry."""
    numas = [n for n in pod.numa_nodes if n in state.numa]
    if not numas:
        return {}
    cpu_numa = state.cpu_numa()
    counts = Counter(cpu_numa[cpu] for cpu in pod.cpuset if cpu_numa.get(cpu) in numas)
    total = sum(counts.values())
    if total == 0:
        # split over every NUMA node the pod claims; an unknown one's part is lost, not moved elsewhere
        return {n: pod.cpu_milli / len(pod.numa_nodes) for n in numas}
    return {n: pod.cpu_milli * counts[n] / total for n in numas if counts[n]}


def _numa_cpus(topology: NodeTopology) -> dict[int, tuple[int, ...]]:
    cpus: dict[int, set[int]] = {numa.id: set(numa.cpus) for numa in topology.numa_nodes}
    for cpu in topology.cpus:
        cpus.setdefault(cpu.numa, set()).add(cpu.cpu)
    return {n: tuple(sorted(c)) for n, c in sorted(cpus.items()) if c}


@dataclass(frozen=True)
class NodeLayout:
    """What a round needs of a node's topology: its CPUs per NUMA node, each
    CPU's core, the reserved CPUs, and whether its node agent offers the
    exclusive CPUs (then it announces every holding on `cpu.assignment`, so
    a pod it announced none for holds none). A topology event is ~28 KiB in memory for
    64 CPUs; the layout is one shared object for every node of the same
    hardware (`layout_of`), so 5,000 nodes cost a few layouts, not 140 MiB."""

    numa_cpus: tuple[tuple[int, tuple[int, ...]], ...]
    cores: tuple[tuple[int, int], ...]
    reserved: frozenset[int]
    announced: bool = False

    # What every sample of a node needs of its layout, worked out once per layout.
    @cached_property
    def cpu_numa(self) -> Mapping[int, int]:
        return MappingProxyType({cpu: n for n, cpus in self.numa_cpus for cpu in cpus})

    @cached_property
    def cpu_core(self) -> Mapping[int, int]:
        return MappingProxyType(dict(self.cores))

    @cached_property
    def pools(self) -> frozenset[tuple[int, ...]]:
        """The cpusets that are a shared pool whoever holds them: every CPU
        not reserved, and every CPU."""
        every = frozenset(self.cpu_numa)
        return frozenset({tuple(sorted(every - self.reserved)), tuple(sorted(every))})


_LAYOUTS: weakref.WeakValueDictionary[tuple, NodeLayout] = weakref.WeakValueDictionary()


def layout_of(topology: NodeTopology) -> NodeLayout:
    """The layout of `topology`, shared with every node laid out the same."""
    fields = (tuple(_numa_cpus(topology).items()), tuple(sorted((c.cpu, c.core) for c in topology.cpus)),
              frozenset(topology.reserved_cpus), topology.exclusive_cpus)
    layout = _LAYOUTS.get(fields)
    if layout is None:
        layout = _LAYOUTS[fields] = NodeLayout(*fields)
    return layout


def told_exclusive(announced: Collection[str] | None, layout: NodeLayout, read_all: bool) -> Collection[str] | None:
    """The pods holding exclusive CPUs on a node as far as the agent told
    (`announced` on `cpu.assignment`, None when it announced nothing for the
    node): an agent offering the exclusive CPUs announces every holding, so
    once every announcement is read (`read_all`) it announced none means
    none; else None (the fallback rule of the module docstring)."""
    if announced is None and layout.announced and read_all:
        return frozenset()
    return announced


def _shared_cpusets(cpusets: list[tuple[int, ...]], pools: frozenset[tuple[int, ...]]) -> set[tuple[int, ...]]:
    seen: dict[tuple[int, ...], int] = {}
    for cpuset in cpusets:
        if cpuset:
            seen[cpuset] = seen.get(cpuset, 0) + 1
    return {cpuset for cpuset, count in seen.items() if count > 1} | pools


def node_state_from(metrics: NodeMetrics, layout: NodeLayout,
                    exclusive_pods: Collection[str] | None = None) -> NodeState:
    """The round's snapshot: NUMA CPUs from the node's layout, NUMA loads
    from the agent's `numa_load` (a NUMA node it did not sample has load
    None), pods from `metrics.pods`. `exclusive_pods` names the pods holding
    exclusive CPUs; None applies the fallback rule of the module docstring."""
    cpu_numa = layout.cpu_numa
    cpusets = [tuple(sorted(usage.cpuset)) for usage in metrics.pods]
    shared = _shared_cpusets(cpusets, layout.pools)
    pods = []
    for usage, cpuset in zip(metrics.pods, cpusets):
        numas = tuple(sorted(set(usage.numa_nodes))) or tuple(sorted({cpu_numa[c] for c in cpuset if c in cpu_numa}))
        exclusive = (usage.pod in exclusive_pods) if exclusive_pods is not None else (
            bool(cpuset) and cpuset not in shared)
        pods.append(PodState(usage.pod, float(usage.cpu_milli), usage.qos, cpuset, numas, usage.frozen,
                             exclusive and bool(cpuset)))
    numa = {n: NumaState(n, cpus, metrics.numa_load.get(n)) for n, cpus in layout.numa_cpus}
    return NodeState(metrics.node, numa, tuple(sorted(pods, key=lambda p: p.name)), layout.reserved, layout.cpu_core,
                     metrics.sampled_at - timedelta(seconds=metrics.interval_s))
