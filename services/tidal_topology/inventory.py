"""§A node report: a `NodeTopology` (capacity and allocatable) from the
machine's topology, its reserved CPUs and GPUs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tidal_schemas import Cpu, Gpu, NodeTopology, NumaNode, Resources

from .sysfs import MachineTopology


def build_node_topology(
    machine: MachineTopology,
    node: str,
    *,
    reserved_cpus: Iterable[int] = (),
    exclusive_cpus: bool = False,
    memory_mib: int | None = None,
    reserved_memory_mib: int = 0,
    gpus: Iterable[Gpu] = (),
    pool: str = "default",
    labels: Mapping[str, str] | None = None,
) -> NodeTopology:
    """The inventory a node agent publishes.

    - per NUMA node n, only when `exclusive_cpus` (kubelet
      `cpu-manager-policy=static`): `capacity_cpus = |cpus(n)|`,
      `allocatable_cpus = |cpus(n)| - |reserved ∩ cpus(n)|`; None otherwise,
      and such a node cannot host pods asking for exclusive CPUs;
    - `capacity.cpu_milli = 1000 · |cpus|`,
      `allocatable.cpu_milli = 1000 · (|cpus| - |reserved|)`;
    - `capacity.memory_mib = memory_mib` (default: the NUMA nodes' sum),
      `allocatable.memory_mib = capacity - reserved_memory_mib`;
    - `capacity.gpu_milli = 1000 · physical GPUs`, allocatable counts the
      healthy ones (virtual GPUs are shares of those, not extra capacity).

    Raises ValueError when a reserved CPU is not on the machine or the
    reserved memory exceeds the memory."""
    all_cpus = [c.cpu for c in machine.cpus]
    reserved = sorted(set(reserved_cpus))
    unknown = sorted(set(reserved) - set(all_cpus))
    if unknown:
        raise ValueError(f"reserved cpus {unknown} are not on this machine (cpus: {all_cpus})")
    memory = sum(machine.numa_memory_mib.values()) if memory_mib is None else memory_mib
    if not 0 <= reserved_memory_mib <= memory:
        raise ValueError(f"reserved memory {reserved_memory_mib} MiB is outside 0..{memory} MiB")

    reserved_set = set(reserved)
    numa_nodes = []
    for numa in machine.numa_ids:
        on_numa = machine.cpus_on(numa)
        numa_nodes.append(NumaNode(
            id=numa,
            cpus=on_numa,
            memory_mib=machine.numa_memory_mib.get(numa, 0),
            capacity_cpus=len(on_numa) if exclusive_cpus else None,
            allocatable_cpus=len(set(on_numa) - reserved_set) if exclusive_cpus else None,
        ))

    gpu_list = list(gpus)
    physical = [g for g in gpu_list if g.kind == "physical"]
    capacity = Resources(cpu_milli=1000 * len(all_cpus), memory_mib=memory, gpu_milli=1000 * len(physical))
    allocatable = Resources(
        cpu_milli=1000 * (len(all_cpus) - len(reserved)),
        memory_mib=memory - reserved_memory_mib,
        gpu_milli=1000 * sum(1 for g in physical if g.healthy),
    )
    return NodeTopology(
        node=node,
        pool=pool,
        cpus=[Cpu(cpu=c.cpu, core=c.core, socket=c.socket, numa=c.numa) for c in machine.cpus],
        numa_nodes=numa_nodes,
        reserved_cpus=reserved,
        exclusive_cpus=exclusive_cpus,
        gpus=gpu_list,
        capacity=capacity,
        allocatable=allocatable,
        labels=dict(labels or {}),
    )
