"""Assemble one `node.metrics` sample from what the agent read (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from tidal_schemas import NodeMetrics, NodeTopology, PodLifecycle, PodUsage

from .usage import PodSample, cpu_used_milli, node_load, numa_loads


def build_metrics(
    topology: NodeTopology,
    *,
    at: datetime,
    interval_s: float,
    cpu_util: Mapping[int, float],
    memory_used_mib: int,
    memory_total_mib: int,
    pod_samples: list[PodSample],
    pods_by_uid: Mapping[str, PodLifecycle],
    cpusets: Mapping[str, list[int]],
    shared_pool: list[int],
    frozen: Mapping[str, bool],
) -> NodeMetrics:
    """Per-CPU utilisation, NUMA load (mean of its CPUs), node use, and the
    usage of every known pod with the cpuset it runs on (its exclusive CPUs,
    or the shared pool) and the NUMA nodes that cpuset covers. Pods the agent
    has no lifecycle event for are left out: it cannot name them."""
    numa_cpus = {numa.id: numa.cpus for numa in topology.numa_nodes}
    cpu_numa = {cpu.cpu: cpu.numa for cpu in topology.cpus}
    loads = numa_loads(cpu_util, numa_cpus)
    usages = []
    for sample in pod_samples:
        pod = pods_by_uid.get(sample.uid)
        if pod is None or sample.cpu_milli is None:
            continue
        key = pod.event_key()
        cpuset = cpusets.get(key, shared_pool)
        usages.append(PodUsage(
            pod=key, uid=sample.uid, cpu_milli=sample.cpu_milli, memory_mib=sample.memory_mib, qos=pod.qos,
            cpuset=sorted(cpuset), numa_nodes=sorted({cpu_numa[c] for c in cpuset if c in cpu_numa}),
            frozen=bool(frozen.get(sample.uid)),
        ))
    return NodeMetrics(
        node=topology.node, sampled_at=at, interval_s=interval_s,
        cpu_util={cpu: min(max(u, 0.0), 1.0) for cpu, u in cpu_util.items()},
        numa_load=loads, node_cpu_util=min(max(node_load(loads), 0.0), 1.0) if loads else 0.0,
        cpu_used_milli=cpu_used_milli(cpu_util), memory_used_mib=memory_used_mib,
        memory_total_mib=memory_total_mib, pods=usages,
    )
