"""What placement decides and what binding it reports back.

Placement publishes the decisions of a scheduling cycle together, up to
MAX_DECISIONS to an event (`PlacementDecisions`, version 2 of the
`placement.decision` stream; `item_batch`). Version 1 carried one decision
as the payload itself; such an event reads as a batch of one. A decision
carries the trace of its own pod (`trace`), since the event's headers can
name one trace only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .common import Name, NonNegInt, NumaId, PodName, Record, Resources, pod_key
from .envelope import Payload, register
from .item_batch import ItemBatch


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


MAX_DECISIONS = 128  # per event: about a kilobyte each, well under the 1 MiB event limit
MAX_TRACEPARENT = 256  # as tidal_bus.trace_context, which parses them
MAX_TRACESTATE = 512


class PlacementDecision(Record):
    """Where a pod goes (`placed`), or why it cannot go anywhere yet (`pending`)."""

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
    trace: str = Field("", max_length=MAX_TRACEPARENT, description="the W3C traceparent of the pod's trace this "
                       "decision continues (\"\": none); never part of an id or an identity check")
    trace_state: str = Field("", max_length=MAX_TRACESTATE, description="the W3C tracestate that came with it")

    def event_key(self) -> str:
        """The pod's key."""
        return pod_key(self.namespace, self.name)

    @model_validator(mode="after")
    def _placed_names_node(self) -> "PlacementDecision":
        if self.outcome == "placed" and not self.node:
            raise ValueError("a placed decision must name its node")
        return self


@register
class PlacementDecisions(ItemBatch[PlacementDecision]):
    """`items`: decisions in the order they were taken, the decision log's order."""

    TYPE = "placement.decision"
    VERSION = 2
    ONE_ITEM_FIELD = "decision_id"

    items: list[PlacementDecision] = Field(min_length=1, max_length=MAX_DECISIONS)

    def event_key(self) -> str:
        """The first decision's pod: the stream has one partition, so the key routes nothing."""
        return self.items[0].event_key()


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
    bound_to: Name | None = Field(
        None, description="refused because the pod is bound already: the node it is bound to. Placement holds it "
        "there from its requests until the pod's own event says what it holds, rather than place it again")

    def event_key(self) -> str:
        return pod_key(self.namespace, self.name)
