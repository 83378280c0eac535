"""NUMA and node load (SPEC §E).

    numa_load(n) = mean of the utilisation of the CPUs of NUMA node n
    node_load    = mean of numa_load over the NUMA nodes

A CPU without a sample is left out of its NUMA node's mean, and a NUMA node
none of whose CPUs was sampled has no load at all: unknown is not idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tidal_schemas import NodeMetrics, NodeTopology


def cpu_to_numa(topology: NodeTopology) -> dict[int, int]:
    """CPU id → NUMA id, from a node's topology (its `cpus` list, else the
    CPU lists of its NUMA nodes)."""
    mapping = {cpu.cpu: cpu.numa for cpu in topology.cpus}
    for numa in topology.numa_nodes:
        for cpu in numa.cpus:
            mapping.setdefault(cpu, numa.id)
    return mapping


def numa_loads(cpu_util: Mapping[int, float], cpu_numa: Mapping[int, int]) -> dict[int, float]:
    """Per NUMA node, the mean utilisation of its sampled CPUs. CPUs absent
    from `cpu_numa` are ignored (see `LoadReport.unmapped_cpus`)."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for cpu, util in cpu_util.items():
        numa = cpu_numa.get(cpu)
        if numa is None:
            continue
        sums[numa] = sums.get(numa, 0.0) + util
        counts[numa] = counts.get(numa, 0) + 1
    return {numa: sums[numa] / counts[numa] for numa in sorted(sums)}


def node_load(numa_load: Mapping[int, float]) -> float | None:
    """Mean of the NUMA loads; None when there is none to average."""
    if not numa_load:
        return None
    return sum(numa_load.values()) / len(numa_load)


@dataclass(frozen=True)
class LoadReport:
    """A node's load, its NUMA breakdown, and what was missing from it."""

    load: float | None
    numa_load: dict[int, float]
    source: str
    unmapped_cpus: list[int] = field(default_factory=list)
    unsampled_numa: list[int] = field(default_factory=list)


def load_from_metrics(metrics: NodeMetrics, topology: NodeTopology | None = None) -> LoadReport:
    """Node and NUMA load of one metrics sample. With a topology and
    per-CPU figures the NUMA loads are recomputed from the CPUs ("cpus");
    otherwise the agent's own per-NUMA figures are used ("numa")."""
    if topology is not None and metrics.cpu_util:
        mapping = cpu_to_numa(topology)
        per_numa = numa_loads(metrics.cpu_util, mapping)
        unmapped = sorted(cpu for cpu in metrics.cpu_util if cpu not in mapping)
        unsampled = sorted(set(mapping.values()) - set(per_numa))
        return LoadReport(node_load(per_numa), per_numa, "cpus", unmapped, unsampled)
    per_numa = {numa: float(util) for numa, util in sorted(metrics.numa_load.items())}
    return LoadReport(node_load(per_numa), per_numa, "numa")
