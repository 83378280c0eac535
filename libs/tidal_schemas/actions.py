"""Commands to nodes and their outcomes."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field, model_validator

from .common import CpuId, Name, NonNegInt, NumaId
from .envelope import Payload, register

# The taint oversell puts on a node that must take no new pods; placement and
# the replay read it.
STOP_SCHEDULING_TAINT = "tidal.dev/stop-scheduling"

ActionKind = Literal["taint", "untaint", "evict", "freeze", "thaw", "set-cpuset"]
_POD_ACTIONS = {"evict", "freeze", "thaw", "set-cpuset"}


@register
class NodeAction(Payload):
    """Something to do on a node, with the reason and the measurements that
    led to it. `dry_run` actions are published for visibility, not executed."""

    TYPE = "node.action"

    action_id: Name
    node: Name
    kind: ActionKind
    pod: str | None = None
    target_numa: NumaId | None = Field(
        None, description="set-cpuset: the NUMA node to move the pod to; the node agent chooses the CPUs")
    cpu_count: NonNegInt = Field(
        0, description="set-cpuset: the exclusive CPUs the pod holds, as the requester knows it (0: none, shared)")
    cpuset: list[CpuId] = Field(
        default_factory=list, description="set-cpuset without target_numa: concrete CPUs, which the node agent "
        "refuses (it alone chooses CPUs); kept for stand-ins that read them")
    mems: list[NumaId] = Field(default_factory=list)
    taint_key: str | None = None
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    reason: str
    measured: dict[str, float] = Field(default_factory=dict)
    dry_run: bool = False
    requested_by: str = ""

    def event_key(self) -> str:
        return self.node

    @model_validator(mode="after")
    def _fields_for_kind(self) -> "NodeAction":
        if self.kind in _POD_ACTIONS and not self.pod:
            raise ValueError(f"a {self.kind} action must name a pod")
        if self.kind == "set-cpuset" and self.target_numa is None and not self.cpuset:
            raise ValueError("a set-cpuset action must give target_numa (or, for stand-ins, a cpuset)")
        if self.kind in ("taint", "untaint") and not self.taint_key:
            raise ValueError(f"a {self.kind} action must give taint_key")
        return self


@register
class ActionResult(Payload):
    """What became of a node action."""

    TYPE = "action.result"

    action_id: Name
    node: Name
    kind: ActionKind
    pod: str | None = None
    status: Literal["done", "failed", "unknown-pod", "refused", "skipped"]
    reason: str = ""
    # When the agent acted, on the clock its usage samples are taken by: a sample
    # whose window began before it may still show a frozen pod's CPU use.
    acted_at: AwareDatetime | None = None

    def event_key(self) -> str:
        return self.node


@register
class CpuAssignment(Payload):
    """Concrete CPUs a node agent gave (or took back from) a pod's container.

    `numa_cpus` counts the CPUs given on each NUMA node (empty when
    released): after a move it differs from the decision's, and placement
    takes it as what the pod bound by `decision_id` holds."""

    TYPE = "cpu.assignment"

    node: Name
    pod: Name
    container: str = ""
    cpuset: list[CpuId]
    released: bool = False
    numa_cpus: dict[int, NonNegInt] = Field(default_factory=dict)
    decision_id: str = Field("", max_length=253, description="the decision the assignment serves ('' for none)")
    reason: str = Field("", max_length=1024, description="why it changed: decision, bind failed, moved, …")

    def event_key(self) -> str:
        return self.node


@register
class DeadLetter(Payload):
    """An event a consumer could not handle: the original bytes and why."""

    TYPE = "dead.letter"

    stream: Name
    key: str = ""
    consumer: str
    reason: str
    retriable: bool = False
    deliveries: NonNegInt = 1
    original_b64: str
    original_size: NonNegInt

    def event_key(self) -> str:
        return self.stream
