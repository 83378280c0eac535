"""What each pod holds, from everything placement knows of it (pure).

Placement reads three streams about a pod — its lifecycle, the decisions
taken for it and the bind results — each in its own task, so in any order
relative to each other when it rebuilds after a restart. The holding is
therefore a function of the latest of each, never of their arrival order:

1. A bound or running pod holds what the cluster says (its event carries the
   decision read back from the pod; devices it holds without their names
   are `Floating`). The cluster is right even against a decision. Its
   exclusive CPUs per NUMA node are those of the node agent's latest
   `cpu.assignment` for the decision it is bound by, when there is one: the
   agent alone moves them (a move leaves the decision written on the pod).
2. Else a pending pod (or one not seen yet) holds its latest admitted
   `placed` decision, unless that decision's bind failed or timed out, or it
   was taken for an earlier pod of the same name (another uid).
3. Else it holds nothing; a pending pod of Tidal's then waits in the queue.

A decision carries the node-level requests it booked, so it is counted in
full even when it is read before the pod's pending event.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidal_schemas import HOLDING_PHASES, CpuAssignment

from .cluster_state import NONE_FLOATING, Allocation, Floating
from .kept import KeptDecision, KeptPod


@dataclass(frozen=True)
class Holding:
    allocation: Allocation
    floating: Floating = NONE_FLOATING
    bound: bool = False  # the cluster says so (else: decided, awaiting its bind)


NONE_FAILED: frozenset[str] = frozenset()  # one for every record (`frozenset()` makes a new one each call)


@dataclass(slots=True)
class PodRecord:
    """The latest of each stream about one pod."""

    key: str  # the very key object every table of placement keys the pod by (`pod_records`)
    pod: KeptPod | None = None
    decision: KeptDecision | None = None  # latest admitted `placed` decision
    failed: frozenset[str] = NONE_FAILED  # decision ids whose bind failed or timed out
    assignment: CpuAssignment | None = None  # the node agent's latest for this pod
    tries: int = 0  # placements this replica made for the pod

    def settle(self) -> None:
        """Forget what only a pending pod reads. Once the cluster has the pod
        bound, running or finished, its holding is the cluster's (rule 1) or
        nothing, whatever decision is read, and no decision id is derived
        from its tries again. Kept, a cluster's pods Tidal placed each held
        its decision for life: about 250 bytes a pod."""
        if self.pod is not None and self.pod.phase != "pending":
            self.decision, self.failed, self.tries = None, NONE_FAILED, 0

    def holds_only_its_pod(self) -> bool:
        """Whether the pod's latest event is all there is to keep (`pod_records`)."""
        return self.decision is None and not self.failed and self.assignment is None and not self.tries

    def live_decision(self) -> KeptDecision | None:
        d = self.decision
        if d is None or (self.failed and d.decision_id in self.failed):
            return None
        mine = self.pod.packed_uid if self.pod is not None else ""
        if mine != "" and d.packed_uid != "" and d.packed_uid != mine:  # taken for an earlier pod of the name
            return None
        return d

    def holding(self) -> Holding | None:
        """What the pod holds now (rules 1–3 of the module docstring)."""
        pod = self.pod
        if pod is not None and pod.phase in HOLDING_PHASES:
            return bound_holding(pod, self.assignment)
        d = self.live_decision()
        if d is None or (pod is not None and pod.phase != "pending"):
            return None
        return Holding(decided_allocation(d, pod))

    def waits(self) -> bool:
        """Whether the pod belongs in the scheduling queue."""
        pod = self.pod
        return pod is not None and pod.phase == "pending" and not pod.foreign and self.live_decision() is None


def bound_holding(pod: KeptPod, assignment: CpuAssignment | None = None) -> Holding:
    """A bound pod's holding: requests at node level, exclusive CPUs and GPUs
    by name when its decision was read back, floating otherwise; the
    exclusive CPUs per NUMA node as `assignment` says when it is the node
    agent's for the decision the pod is bound by, on its node."""
    numa_cpus = pod.numa_cpus
    if assignment is not None and not assignment.released and assignment.node == pod.node \
            and pod.decision_id and assignment.decision_id == pod.decision_id:
        numa_cpus = assignment.numa_cpus
    gpus = (pod.gpu.milli,) * pod.gpu.count if pod.gpu.count and not pod.gpus else ()
    exclusive_cpus = pod.requests.cpu_milli // 1000 if pod.exclusive_cpus and not numa_cpus else 0
    # most pods hold nothing floating: they share one record rather than keep one each
    floating = Floating(gpus, exclusive_cpus) if gpus or exclusive_cpus else NONE_FLOATING
    allocation = Allocation.of(pod.node or "", pod.requests.cpu_milli, pod.requests.memory_mib, numa_cpus,
                               {share.gpu: share.milli for share in pod.gpus})
    return Holding(allocation, floating, bound=True)


def decided_allocation(decision: KeptDecision, pod: KeptPod | None) -> Allocation:
    """What a placed decision books (the requests it carries; a decision of an
    older placement without them books the pod's requests when known)."""
    requests = decision.requests
    if pod is not None and not (requests.cpu_milli or requests.memory_mib):
        requests = pod.requests
    return Allocation.of(decision.node or "", requests.cpu_milli, requests.memory_mib, decision.numa_cpus,
                         {share.gpu: share.milli for share in decision.gpus})
