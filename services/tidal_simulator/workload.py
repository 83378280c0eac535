"""What a simulation runs: nodes, tenants and pods with their usage curves
and arrival times, whatever the source (scenario file, synthetic generator,
openb trace). Plain data; the model and the driver read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidal_schemas import NodeTopology, TenantConfig

from .pods import SimPod
from .usage_curves import UsageSpec


@dataclass(frozen=True)
class SimNode:
    """A node: its inventory, a background CPU load per NUMA node (fraction
    of each CPU used by things that are not pods) and memory used by the
    system."""

    topology: NodeTopology
    background: dict[int, float] = field(default_factory=dict)
    system_memory_mib: int = 0


@dataclass(frozen=True)
class SimPodSpec:
    """A pod: its pending event, usage curves, when it arrives (scenario
    seconds), how long it runs once started (None = until evicted or the
    end), and for pods already running at the start, where (`node`, and
    optionally the NUMA nodes its cpuset is pinned to)."""

    pod: SimPod
    usage: UsageSpec = UsageSpec()
    arrive_s: float = 0.0
    duration_s: float | None = None
    node: str | None = None
    pin_numa: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        return self.pod.event_key()


@dataclass(frozen=True)
class Workload:
    """Everything one simulation needs, plus what its source was."""

    name: str
    nodes: tuple[SimNode, ...]
    pods: tuple[SimPodSpec, ...]
    tenants: tuple[TenantConfig, ...] = ()
    expectations: tuple[Any, ...] = ()
    tick_s: float = 10.0
    duration_s: float | None = None
    source: dict[str, Any] = field(default_factory=dict)

    def gpu_capacity_milli(self) -> int:
        """Milli-GPU of every healthy GPU of every node."""
        return sum(1000 * sum(1 for g in n.topology.gpus if g.healthy) for n in self.nodes)

    def cpu_capacity_milli(self) -> int:
        return sum(n.topology.allocatable.cpu_milli for n in self.nodes)
