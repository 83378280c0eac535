"""A node's usage sample from the model (pure), shaped exactly as the node
agent's: per-CPU utilisation, NUMA load = mean of its CPUs (§E), and every
pod's usage with its cpuset and frozen flag as its cgroup has them (the
machine's cgroup tree, which the node agent writes), NUMA nodes and QoS.

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
from tidal_topology import build_metrics
from tidal_topology import PodSample

from .model import ClusterModel, PodState
from .usage_curves import fraction_at, is_static


def pod_use(pod: PodState, t_s: float, rng: np.random.Generator | None, cpus: int, frozen: bool = False
            ) -> tuple[int, int]:
    """(milli-CPU, MiB) a running pod uses at `t_s`; noise draws from `rng`
    (only for curves that have noise, in a fixed order: CPU then memory)."""
    usage, ask = pod.spec.usage, pod.request.requests
    z_cpu = float(rng.standard_normal()) if rng is not None and usage.cpu.noise else 0.0
    z_mem = float(rng.standard_normal()) if rng is not None and usage.memory.noise else 0.0
    cpu = 0 if frozen else round(ask.cpu_milli * fraction_at(usage.cpu, t_s, z_cpu))
    if cpus:
        cpu = min(cpu, 1000 * cpus)
    return cpu, round(ask.memory_mib * fraction_at(usage.memory, t_s, z_mem))


def node_is_static(model: ClusterModel, node: str) -> bool:
    """Whether the node's sample cannot change until its pods change."""
    return all(is_static(p.spec.usage) for p in model.running_on(node))


def sample_node(model: ClusterModel, node: str, t_s: float, at: datetime, interval_s: float,
                rng: np.random.Generator | None = None, shared_pool: list[int] | None = None) -> NodeMetrics:
    """The node's `NodeMetrics` at scenario time `t_s` (see the module
    docstring); `shared_pool` is its agent's (default: every CPU)."""
    sim = model.nodes[node]
    topology = sim.topology
    pods = model.running_on(node)
    numa_of = {c.cpu: c.numa for c in topology.cpus}
    util = {c.cpu: float(sim.background.get(c.numa, 0.0)) for c in topology.cpus}
    samples, cpusets, frozen, by_uid, usages = [], {}, {}, {}, []
    memory = sim.system_memory_mib
    for pod in pods:
        cpuset, is_frozen = model.cpuset(pod), model.frozen(pod)
        cpu, mem = pod_use(pod, t_s, rng, len(cpuset), is_frozen)
        memory += mem
        for c in cpuset:
            util[c] = util.get(c, 0.0) + cpu / (1000.0 * len(cpuset))
        uid = pod.request.uid or pod.key
        samples.append(PodSample(uid=uid, cpu_milli=cpu, memory_mib=mem))
        by_uid[uid] = pod.request  # the agent names a pod by its key and QoS
        if cpuset:
            cpusets[pod.key] = cpuset
        frozen[uid] = is_frozen
        usages.append(PodUsage(pod=pod.key, uid=uid, cpu_milli=cpu, memory_mib=mem, qos=pod.request.qos,
                               cpuset=cpuset, numa_nodes=sorted({numa_of[c] for c in cpuset if c in numa_of}),
                               frozen=is_frozen))
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
                         shared_pool=sorted(c.cpu for c in topology.cpus) if shared_pool is None else shared_pool,
                         frozen=frozen)


class SampleSchedule:
    """Which nodes to sample this tick: those whose pods changed, those whose
    sample moves with time, and the rest every `heartbeat_s` (None: every tick)."""

    def __init__(self, nodes: list[str], heartbeat_s: float | None) -> None:
        self.nodes, self.heartbeat_s = sorted(nodes), heartbeat_s
        self.dirty: set[str] = set(nodes)
        self.static: dict[str, bool] = {}
        self.sampled_at: dict[str, float] = {}

    def due(self, model: ClusterModel, t: float, force: bool = False) -> list[str]:
        for node in self.dirty:  # whether a node's sample moves with time changes only with its pods
            self.static[node] = node_is_static(model, node)
        heartbeat, dirty = self.heartbeat_s, self.dirty
        self.dirty = set()
        due = [node for node in self.nodes
               if force or heartbeat is None or node in dirty or not self.static.get(node, True)
               or t - self.sampled_at.get(node, -1e18) >= heartbeat]
        for node in due:
            self.sampled_at[node] = t
        return due
