"""Build `NodeTopology` events from a few numbers — for synthetic clusters
(benchmarks, the simulator, tests). Two hardware threads per core, one
socket per NUMA node, CPUs numbered NUMA by NUMA.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidal_schemas import Cpu, Gpu, NodeTopology, NumaNode, Resources


def make_topology(name: str, numa_cpus: Sequence[int] = (8,), *, gpus: int = 0, model: str = "A100",
                  virtual: int = 0, memory_mib: int = 65536, exclusive: bool = True,
                  reserved: Sequence[int] = (), unhealthy: Sequence[int] = ()) -> NodeTopology:
    """A node with `numa_cpus[j]` CPUs on NUMA node j, `gpus` physical GPUs
    (`gpu0`…) plus `virtual` vGPUs (`vgpu0`…) of `model`. Per-NUMA
    allocatable = CPUs − reserved CPUs there when `exclusive`."""
    cpus, numa_nodes, first = [], [], 0
    for j, count in enumerate(numa_cpus):
        ids = list(range(first, first + count))
        cpus += [Cpu(cpu=c, core=c // 2, socket=j, numa=j) for c in ids]
        free = len([c for c in ids if c not in reserved])
        numa_nodes.append(NumaNode(id=j, cpus=ids, memory_mib=memory_mib // max(len(numa_cpus), 1),
                                   capacity_cpus=count if exclusive else None,
                                   allocatable_cpus=free if exclusive else None))
        first += count
    devices = [Gpu(id=f"gpu{i}", index=i, model=model, healthy=i not in unhealthy) for i in range(gpus)]
    devices += [Gpu(id=f"vgpu{i}", index=gpus + i, model=model, kind="virtual", parent="gpu0")
                for i in range(virtual)]
    total = sum(numa_cpus) * 1000
    capacity = Resources(cpu_milli=total, memory_mib=memory_mib, gpu_milli=1000 * len(devices))
    allocatable = Resources(cpu_milli=total - 1000 * len(reserved), memory_mib=memory_mib,
                            gpu_milli=1000 * len(devices))
    return NodeTopology(node=name, cpus=cpus, numa_nodes=numa_nodes, reserved_cpus=list(reserved),
                        exclusive_cpus=exclusive, gpus=devices, capacity=capacity, allocatable=allocatable)
