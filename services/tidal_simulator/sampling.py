"""A node's usage sample from the model (pure), shaped exactly as the node
agent's: per-CPU utilisation, NUMA load = mean of its CPUs (§E), and every
pod's usage with its cpuset, NUMA nodes, QoS and frozen flag.

A pod's CPU use, u = request · f_cpu(t) (0 while frozen), capped at its
cpuset (1000 per CPU), is spread evenly over its cpuset; a CPU carries the
node's background load of its NUMA node plus its share of every pod on it,
capped at 1:

    util(c) = min(1, background(numa(c)) + Σ_{p: c ∈ cpuset(p)} u_p / (1000 · |cpuset(p)|))

Memory used = system memory + Σ request_mem · f_mem(t) over the node's pods
(frozen pods keep their memory).
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from tidal_schemas import NodeMetrics, PodUsage
from tidal_topology.sampling import build_metrics
from tidal_topology.usage import PodSample

from .model import ClusterModel, PodState
from .usage_curves import fraction_at, is_static


def pod_use(pod: PodState, t_s: float, rng: np.random.Generator | None, cpus: int) -> tuple[int, int]:
    """(milli-CPU, MiB) a running pod uses at `t_s`; noise draws from `rng`
    (only for curves that have noise, in a fixed order: CPU then memory)."""
    usage, ask = pod.spec.usage, pod.request.requests
    z_cpu = float(rng.standard_normal()) if rng is not None and usage.cpu.noise else 0.0
    z_mem = float(rng.standard_normal()) if rng is not None and usage.memory.noise else 0.0
    cpu = 0 if pod.frozen else round(ask.cpu_milli * fraction_at(usage.cpu, t_s, z_cpu))
    if cpus:
        cpu = min(cpu, 1000 * cpus)
    return cpu, round(ask.memory_mib * fraction_at(usage.memory, t_s, z_mem))


def node_is_static(model: ClusterModel, node: str) -> bool:
    """Whether the node's sample cannot change until its pods change."""
    return all(is_static(p.spec.usage) for p in model.running_on(node))


def sample_node(model: ClusterModel, node: str, t_s: float, at: datetime, interval_s: float,
                rng: np.random.Generator | None = None) -> NodeMetrics:
    """The node's `NodeMetrics` at scenario time `t_s` (see the module docstring)."""
    sim = model.nodes[node]
    topology = sim.topology
    pods = model.running_on(node)
    numa_of = {c.cpu: c.numa for c in topology.cpus}
    util = {c.cpu: float(sim.background.get(c.numa, 0.0)) for c in topology.cpus}
    samples, cpusets, frozen, by_uid, usages = [], {}, {}, {}, []
    memory = sim.system_memory_mib
    for pod in pods:
        cpuset = model.cpuset(pod)
        cpu, mem = pod_use(pod, t_s, rng, len(cpuset))
        memory += mem
        for c in cpuset:
            util[c] = util.get(c, 0.0) + cpu / (1000.0 * len(cpuset))
        uid = pod.request.uid or pod.key
        samples.append(PodSample(uid=uid, cpu_milli=cpu, memory_mib=mem))
        by_uid[uid] = pod.request  # the agent names a pod by its key and QoS
        if pod.pinned is not None or pod.assigned:
            cpusets[pod.key] = cpuset
        frozen[uid] = pod.frozen
        usages.append(PodUsage(pod=pod.key, uid=uid, cpu_milli=cpu, memory_mib=mem, qos=pod.request.qos,
                               cpuset=cpuset, numa_nodes=sorted({numa_of[c] for c in cpuset if c in numa_of}),
                               frozen=pod.frozen))
    total_memory = topology.capacity.memory_mib
    if not topology.cpus:  # a node known by totals only (e.g. an openb trace node): no per-CPU figures
        used = sum(u.cpu_milli for u in usages)
        capacity = max(topology.capacity.cpu_milli, 1)
        return NodeMetrics(node=node, sampled_at=at, interval_s=interval_s, node_cpu_util=min(used / capacity, 1.0),
                           cpu_used_milli=used, memory_used_mib=min(memory, total_memory),
                           memory_total_mib=total_memory, pods=usages)
    return build_metrics(topology, at=at, interval_s=interval_s, cpu_util={c: min(u, 1.0) for c, u in util.items()},
                         memory_used_mib=min(memory, total_memory), memory_total_mib=total_memory,
                         pod_samples=samples, pods_by_uid=by_uid, cpusets=cpusets,
                         shared_pool=model.shared_pool(node), frozen=frozen)
