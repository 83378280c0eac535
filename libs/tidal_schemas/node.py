"""What a node agent reports: topology, usage, and what oversell allows."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field, model_validator

from .common import CpuId, Fraction, GpuKind, Name, NonNegInt, NumaId, Qos, Record, Resources, repeated
from .envelope import Payload, register
from .node_batch import NodeBatch


class Cpu(Record):
    """One logical CPU (hardware thread) and where it sits."""

    cpu: CpuId
    core: NonNegInt
    socket: NonNegInt
    numa: NumaId


class NumaNode(Record):
    """One NUMA domain. CPU capacity/allocatable are present only when the
    node offers exclusive CPUs (allocatable = capacity - reserved here)."""

    id: NumaId
    cpus: list[CpuId]
    memory_mib: NonNegInt = 0
    capacity_cpus: NonNegInt | None = None
    allocatable_cpus: NonNegInt | None = None


class Gpu(Record):
    """One GPU device; a virtual one (vGPU/MIG) names its physical parent."""

    id: Name
    index: NonNegInt = 0
    model: Name
    kind: GpuKind = "physical"
    parent: str | None = None
    memory_mib: NonNegInt = 0
    numa: NonNegInt | None = None
    healthy: bool = True

    @model_validator(mode="after")
    def _virtual_names_its_parent(self) -> "Gpu":
        # A slice is a share of one physical GPU: placement budgets them together.
        if self.kind == "virtual" and not self.parent:
            raise ValueError(f"virtual GPU {self.id} must name its physical parent")
        if self.kind == "physical" and self.parent:
            raise ValueError(f"physical GPU {self.id} cannot have a parent")
        return self


@register
class NodeTopology(Payload):
    """Inventory of a node, published at start and whenever it changes."""

    TYPE = "node.topology"

    node: Name
    pool: str = "default"
    cpus: list[Cpu] = Field(default_factory=list)
    numa_nodes: list[NumaNode] = Field(default_factory=list)
    reserved_cpus: list[CpuId] = Field(default_factory=list)
    exclusive_cpus: bool = False
    gpus: list[Gpu] = Field(default_factory=list)
    capacity: Resources
    allocatable: Resources
    labels: dict[str, str] = Field(default_factory=dict)

    def event_key(self) -> str:
        return self.node

    @property
    def sockets(self) -> list[int]:
        return sorted({cpu.socket for cpu in self.cpus})

    @model_validator(mode="after")
    def _allocatable_within_capacity(self) -> "NodeTopology":
        for what, ids in (("CPU", (cpu.cpu for cpu in self.cpus)), ("NUMA node", (n.id for n in self.numa_nodes))):
            twice = repeated(ids)
            if twice:
                raise ValueError(f"{what} ids must be unique, repeated: {', '.join(map(str, twice[:10]))}")
        for field in ("cpu_milli", "memory_mib", "gpu_milli"):
            if getattr(self.allocatable, field) > getattr(self.capacity, field):
                raise ValueError(f"allocatable.{field} exceeds capacity.{field}")
        physical = {g.id for g in self.gpus if g.kind == "physical"}
        orphans = sorted(g.id for g in self.gpus if g.kind == "virtual" and g.parent not in physical)
        if orphans:
            raise ValueError(f"virtual GPUs {orphans[:5]} name a parent that is not a physical GPU of this node")
        return self


class PodUsage(Record):
    """What one pod used over the last interval on this node."""

    pod: Name  # namespace/name
    uid: str = ""
    cpu_milli: NonNegInt = 0
    memory_mib: NonNegInt = 0
    qos: Qos = "BE"
    cpuset: list[CpuId] = Field(default_factory=list)
    numa_nodes: list[NumaId] = Field(default_factory=list)
    frozen: bool = False


@register
class NodeMetrics(Payload):
    """One usage sample of a node, every sampling interval."""

    TYPE = "node.metrics"

    node: Name
    sampled_at: AwareDatetime
    interval_s: float = Field(gt=0)
    cpu_util: dict[CpuId, Fraction] = Field(default_factory=dict)
    numa_load: dict[NumaId, Fraction] = Field(default_factory=dict)
    node_cpu_util: Fraction = 0.0
    cpu_used_milli: NonNegInt = 0
    memory_used_mib: NonNegInt = 0
    memory_total_mib: NonNegInt = 0
    pods: list[PodUsage] = Field(default_factory=list)

    def event_key(self) -> str:
        return self.node


OversellPolicy = Literal["factor", "bounded", "none"]
"""The names of `tidal_oversell.policies.OVERSELL_POLICIES`."""


class NodeAllocatable(Record):
    """The (possibly oversold) allocatable oversell grants a node, with why,
    on one sample (`sample`: that `node.metrics` event's id, when oversell
    answered one). NUMA-level figures are never oversold, so only node
    totals appear."""

    node: Name
    policy: OversellPolicy
    capacity: Resources
    allocatable: Resources
    factor: float | None = Field(default=None, ge=0, description="the smallest of `factors`")
    factors: dict[str, float] = Field(default_factory=dict, description="allocatable / the node's own, per resource "
                                      "('cpu', 'memory'): each resource follows its own usage")
    inputs: dict[str, float] = Field(default_factory=dict)
    reason: str = ""
    sample: str | None = Field(default=None, max_length=128)


@register
class NodeAllocatables(NodeBatch[NodeAllocatable]):
    """Allocatable of one partition's nodes, one per sample oversell had in hand (`node_batch`)."""

    TYPE = "node.allocatable"
    VERSION = 2


@register
class NodeStatus(Payload):
    """The CPU and memory a Node object's status.allocatable gives the kubelet.

    What the kubelet admits pods against: the oversold figure once the
    admission webhook wrote it there, the kubelet's own otherwise. Published
    by the bridge when it changes, one node an event: the stream keeps each
    node's last. `deleted`: the Node object is gone, and nothing is admitted
    there. GPUs are not in it: placement counts them by device."""

    TYPE = "node.status"

    node: Name
    allocatable: Resources = Field(default_factory=Resources)
    deleted: bool = False

    def event_key(self) -> str:
        return self.node
