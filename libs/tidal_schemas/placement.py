"""What placement decides and what binding it reports back."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .common import Name, NonNegInt, NumaId, PodName, Record, Resources, pod_key
from .envelope import Payload, register


class GpuShare(Record):
    """A GPU given to a pod, whole (1000) or in part."""

    gpu: Name
    milli: int = Field(ge=1, le=1000)
    model: str = ""


class NodeCandidate(Record):
    """How one node scored for a pod; lower total is better."""

    node: Name
    score: float
    breakdown: dict[str, float] = Field(default_factory=dict)
    numa_nodes: list[NonNegInt] = Field(default_factory=list)


@register
class PlacementDecision(Payload):
    """Where a pod goes (`placed`), or why it cannot go anywhere yet (`pending`)."""

    TYPE = "placement.decision"

    decision_id: Name
    namespace: PodName
    name: PodName
    uid: str = ""
    outcome: Literal["placed", "pending", "fence"]
    node: str | None = None
    numa_cpus: dict[NumaId, NonNegInt] = Field(
        default_factory=dict, description="exclusive CPUs to take on each NUMA node"
    )
    numa_nodes: list[NumaId] = Field(default_factory=list)
    gpus: list[GpuShare] = Field(default_factory=list)
    requests: Resources = Field(
        default_factory=Resources, description="placed: the node-level CPU and memory booked for the pod")
    chosen: NodeCandidate | None = None
    runners_up: list[NodeCandidate] = Field(default_factory=list)
    filtered: dict[str, NonNegInt] = Field(
        default_factory=dict, description="number of nodes filtered out, by reason: a filter stage (cpu, "
        "memory, gpu, gpu-model, numa, no-exclusive-cpus, not-permitted) or why a node takes no new pods "
        "(a taint, stale metrics)"
    )
    nodes: NonNegInt | None = Field(
        None, description="pending: the nodes in the cluster when the pod was tried (the N of '0/N nodes')")
    reason: str = ""
    queue_position: NonNegInt | None = None
    fair_share_score: float | None = None
    epoch: NonNegInt = Field(0, description="the placement leader's term; see tidal_schemas.fence")
    leader: str = ""

    def event_key(self) -> str:
        return pod_key(self.namespace, self.name)

    @model_validator(mode="after")
    def _placed_names_node(self) -> "PlacementDecision":
        if self.outcome == "placed" and not self.node:
            raise ValueError("a placed decision must name its node")
        return self


@register
class BindResult(Payload):
    """Whether the cluster accepted a placement decision."""

    TYPE = "bind.result"

    decision_id: Name
    namespace: PodName
    name: PodName
    node: Name
    ok: bool
    reason: str = ""

    def event_key(self) -> str:
        return pod_key(self.namespace, self.name)
