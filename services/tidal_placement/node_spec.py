"""What the scheduler cache keeps of a `NodeTopology`: a flat, validated spec.

Per NUMA node, the CPUs offered for exclusive use are
`allocatable_cpus` when the agent reports it (SPEC §A: capacity − reserved),
else the NUMA node's CPUs minus the node's reserved CPUs on it. Only a node
that reports exclusive CPUs *and* per-NUMA allocatable figures may host pods
that ask for exclusive CPUs. A node with no NUMA information gets one
pseudo NUMA node (id 0) holding all its allocatable CPUs, so §E scoring
still has something to rank. Each GPU keeps its physical root and weight
(`device_budget`), so a physical GPU and its slices are one budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal_schemas import NodeTopology

from .device_budget import roots_and_weights


@dataclass(frozen=True)
class NodeSpec:
    """A node's static facts, ready to be written into one row of arrays."""

    name: str
    cpu_milli: int
    memory_mib: int
    numa_ids: tuple[int, ...]
    numa_cpus: tuple[int, ...]
    exclusive: bool
    gpu_ids: tuple[str, ...]
    gpu_models: tuple[str, ...]
    gpu_virtual: tuple[bool, ...]
    gpu_healthy: tuple[bool, ...]
    gpu_roots: tuple[int, ...] = ()
    gpu_weights: tuple[int, ...] = ()

    @property
    def sliced(self) -> bool:
        """Whether some device is a slice of another (device_budget)."""
        return any(root != j for j, root in enumerate(self.gpu_roots))

    @property
    def model(self) -> str | None:
        """The node's GPU model: the most common model among its GPUs."""
        if not self.gpu_models:
            return None
        return max(sorted(set(self.gpu_models)), key=self.gpu_models.count)


def node_spec(topology: NodeTopology) -> NodeSpec:
    """Flatten a topology event into the figures placement needs."""
    reserved = set(topology.reserved_cpus)
    numa_nodes = sorted(topology.numa_nodes, key=lambda n: n.id)
    if numa_nodes:
        numa_ids = tuple(n.id for n in numa_nodes)
        numa_cpus = tuple(
            n.allocatable_cpus if n.allocatable_cpus is not None
            else len([c for c in n.cpus if c not in reserved])
            for n in numa_nodes
        )
        reports_numa = all(n.allocatable_cpus is not None for n in numa_nodes)
    else:
        numa_ids = (0,)
        numa_cpus = (topology.allocatable.cpu_milli // 1000,)
        reports_numa = False
    gpus = sorted(topology.gpus, key=lambda g: (g.index, g.id))
    roots, weights = roots_and_weights([g.id for g in gpus], [g.parent for g in gpus], [g.memory_mib for g in gpus])
    return NodeSpec(
        name=topology.node,
        cpu_milli=topology.allocatable.cpu_milli,
        memory_mib=topology.allocatable.memory_mib,
        numa_ids=numa_ids,
        numa_cpus=numa_cpus,
        exclusive=topology.exclusive_cpus and reports_numa,
        gpu_ids=tuple(g.id for g in gpus),
        gpu_models=tuple(g.model for g in gpus),
        gpu_virtual=tuple(g.kind == "virtual" for g in gpus),
        gpu_healthy=tuple(g.healthy for g in gpus),
        gpu_roots=roots,
        gpu_weights=weights,
    )
