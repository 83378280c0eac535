"""The simulated cluster (pure): which pod runs where, holding which GPUs and
exclusive CPUs, frozen or not, pinned to which cpuset, and which node is
tainted. Every change returns the events a real cluster would publish about
it (bridge: bind results, pod lifecycle, taint/evict results; node agent:
CPU assignments, freeze/thaw/cpuset results), for the service to send.

Binding checks what the API server and the kubelet would: the pod exists,
is the one decided for and is not bound yet; the node exists; the node's
(possibly oversold) allocatable still covers every pod's CPU and memory
requests; each GPU named exists, is healthy and has the milli left; the
exclusive CPUs can be taken per NUMA node from the shared pool (the node
agent's packed allocator). A refusal is a failed `BindResult`, never a
partial change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from tidal_schemas import (
    ActionResult, BindResult, CpuAssignment, GpuShare, NodeAction, Payload, PlacementDecision, PodLifecycle,
    Resources,
)
from tidal_topology.cpu_allocator import pick_cpus, pick_per_numa

from .workload import SimNode, SimPodSpec

GPU_MILLI = 1000


@dataclass
class PodState:
    """One pod and what it holds now. Phases: waiting (not arrived yet) →
    pending → running → deleted."""

    spec: SimPodSpec
    phase: str = "waiting"
    node: str | None = None
    numa_cpus: dict[int, int] = field(default_factory=dict)
    gpus: tuple[GpuShare, ...] = ()
    assigned: tuple[int, ...] = ()
    pinned: tuple[int, ...] | None = None
    frozen: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    started_s: float | None = None
    decision_id: str | None = None

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def request(self) -> PodLifecycle:
        return self.spec.pod


@dataclass(frozen=True)
class Outcome:
    """Whether a change was made, why not, and the events that report it."""

    ok: bool
    reason: str = ""
    events: tuple[Payload, ...] = ()


class ClusterModel:
    """Nodes and pods of one simulation; see the module docstring."""

    def __init__(self, nodes: Iterable[SimNode], pods: Iterable[SimPodSpec]) -> None:
        self.nodes: dict[str, SimNode] = {n.topology.node: n for n in nodes}
        self.allocatable: dict[str, Resources] = {k: n.topology.allocatable for k, n in self.nodes.items()}
        self.taints: dict[str, set[str]] = {k: set() for k in self.nodes}
        self.gpu_used: dict[str, dict[str, int]] = {k: {} for k in self.nodes}
        self.gpu_model = {k: {g.id: g.model for g in n.topology.gpus} for k, n in self.nodes.items()}
        self.pods: dict[str, PodState] = {}
        for spec in pods:
            if spec.key in self.pods:
                raise ValueError(f"pod {spec.key} is defined twice")
            self.pods[spec.key] = PodState(spec)
        self._on_node: dict[str, set[str]] = {k: set() for k in self.nodes}
        self._timed: set[str] = set()  # running pods with a run time

    # -- reading ----------------------------------------------------------------
    def running_on(self, node: str) -> list[PodState]:
        """Pods running on `node`, by key."""
        return [self.pods[k] for k in sorted(self._on_node.get(node, ()))]

    def requested_on(self, node: str) -> Resources:
        """Σ CPU and memory requests and GPU milli held by the pods on `node`."""
        pods = self.running_on(node)
        return Resources(cpu_milli=sum(p.request.requests.cpu_milli for p in pods),
                         memory_mib=sum(p.request.requests.memory_mib for p in pods),
                         gpu_milli=sum(self.gpu_used[node].values()))

    def shared_pool(self, node: str) -> list[int]:
        """CPUs not reserved and not held exclusively: what shared pods run on."""
        topology = self.nodes[node].topology
        taken = set(topology.reserved_cpus)
        for pod in self.running_on(node):
            taken.update(pod.assigned)
        return sorted(c.cpu for c in topology.cpus if c.cpu not in taken)

    def cpuset(self, pod: PodState) -> list[int]:
        """The CPUs a pod runs on: set by an action, else its exclusive CPUs,
        else the shared pool of its node."""
        if pod.pinned is not None:
            return list(pod.pinned)
        if pod.assigned:
            return list(pod.assigned)
        return self.shared_pool(pod.node) if pod.node else []

    def gpu_free(self, node: str) -> dict[str, int]:
        """Milli-GPU left on each healthy GPU of `node`."""
        used = self.gpu_used[node]
        return {g.id: GPU_MILLI - used.get(g.id, 0) for g in self.nodes[node].topology.gpus if g.healthy}

    # -- pods arriving, binding, leaving -------------------------------------
    def arrive(self, key: str, at: datetime) -> PodLifecycle:
        """The pod is created: its pending event."""
        pod = self.pods[key]
        pod.phase, pod.created_at = "pending", at
        return pod.request.model_copy(update={"phase": "pending", "created_at": at})

    def bind(self, decision: PlacementDecision, at: datetime, t_s: float) -> Outcome:
        """Carry out a `placed` decision (checks in the module docstring)."""
        key = decision.event_key()
        pod = self.pods.get(key)
        problem = self._bind_problem(pod, decision)
        if problem is not None:
            return problem
        assert pod is not None and decision.node is not None
        node = decision.node
        assigned: tuple[int, ...] = ()
        if pod.request.exclusive_cpus:
            picked = pick_per_numa(self.nodes[node].topology.cpus, self.shared_pool(node), decision.numa_cpus)
            if picked.cpus is None:
                return self._refused(decision, f"node {node} cannot give exclusive CPUs "
                                               f"{dict(decision.numa_cpus)}: {picked.reason}")
            assigned = tuple(picked.cpus)
        gpus = tuple(GpuShare(gpu=g.gpu, milli=g.milli, model=self.gpu_model[node].get(g.gpu, ""))
                     for g in decision.gpus)
        self._start(pod, node, at, t_s, dict(decision.numa_cpus), gpus, assigned)
        pod.decision_id = decision.decision_id
        result = BindResult(decision_id=decision.decision_id, namespace=decision.namespace, name=decision.name,
                            node=node, ok=True)
        return Outcome(True, "", (result, *self._started_events(pod)))

    def place(self, key: str, node: str, at: datetime, t_s: float) -> Outcome:
        """Start a pod already running when the simulation begins, on `node`:
        the first GPUs with room, the exclusive CPUs spread as the node agent
        would pack them, its cpuset pinned to `pin_numa` when given."""
        pod = self.pods[key]
        ask, topology = pod.request, self.nodes[node].topology
        free = self.gpu_free(node)
        fitting = [g for g, left in free.items() if left >= ask.gpu.milli][:ask.gpu.count] if ask.gpu.count else []
        if len(fitting) < ask.gpu.count:
            return Outcome(False, f"pod {key}: node {node} has not {ask.gpu.count} GPUs with {ask.gpu.milli} milli left")
        assigned: tuple[int, ...] = ()
        numa_cpus: dict[int, int] = {}
        if ask.exclusive_cpus:
            picked = pick_cpus(topology.cpus, self.shared_pool(node), ask.requests.cpu_milli // 1000)
            if picked.cpus is None:
                return Outcome(False, f"pod {key}: node {node}: {picked.reason}")
            assigned = tuple(picked.cpus)
            numa_of = {c.cpu: c.numa for c in topology.cpus}
            for cpu in assigned:
                numa_cpus[numa_of[cpu]] = numa_cpus.get(numa_of[cpu], 0) + 1
        gpus = tuple(GpuShare(gpu=g, milli=ask.gpu.milli, model=self.gpu_model[node][g]) for g in fitting)
        pod.phase, pod.created_at = "pending", at
        self._start(pod, node, at, t_s, numa_cpus, gpus, assigned)
        if pod.spec.pin_numa:
            pod.pinned = tuple(sorted(c.cpu for c in topology.cpus if c.numa in pod.spec.pin_numa))
        return Outcome(True, "", self._started_events(pod))

    def refuse(self, decision: PlacementDecision, reason: str) -> BindResult:
        """A failed bind result for `decision`, the model unchanged."""
        return BindResult(decision_id=decision.decision_id, namespace=decision.namespace, name=decision.name,
                          node=decision.node or "-", ok=False, reason=reason)

    def finish_due(self, t_s: float, at: datetime) -> list[Payload]:
        """Pods whose run time is over leave (deleted events)."""
        events: list[Payload] = []
        for key in sorted(self._timed):
            pod = self.pods[key]
            if pod.started_s is not None and t_s >= pod.started_s + (pod.spec.duration_s or 0.0):
                events += self._delete(pod, at)
        return events

    # -- actions --------------------------------------------------------------
    def act(self, action: NodeAction, at: datetime) -> Outcome:
        """Carry out a node action; its `ActionResult` (and, for an eviction,
        the pod's deletion) in the events. Taint and evict are what the
        bridge does; freeze, thaw and set-cpuset what the node agent does."""
        def result(status: str, reason: str = "") -> ActionResult:
            return ActionResult(action_id=action.action_id, node=action.node, kind=action.kind, pod=action.pod,
                                status=status, reason=reason)

        if action.node not in self.nodes:
            return Outcome(False, "unknown node", (result("failed", f"no node {action.node} in the simulation"),))
        if action.dry_run:
            return Outcome(False, "dry run", (result("skipped", "dry run: not executed"),))
        if action.kind in ("taint", "untaint"):
            taints = self.taints[action.node]
            (taints.add if action.kind == "taint" else taints.discard)(action.taint_key or "")
            return Outcome(True, "", (result("done"),))
        pod = self.pods.get(action.pod or "")
        if pod is None or pod.phase != "running":
            return Outcome(False, "unknown pod", (result("unknown-pod", f"no running pod {action.pod}"),))
        if pod.node != action.node:
            return Outcome(False, "other node", (result("refused", f"pod {action.pod} runs on {pod.node}"),))
        if action.kind == "evict":
            return Outcome(True, "", (result("done", "evicted"), *self._delete(pod, at)))
        if action.kind in ("freeze", "thaw"):
            pod.frozen = action.kind == "freeze"
            return Outcome(True, "", (result("done"),))
        known = {c.cpu for c in self.nodes[action.node].topology.cpus}
        if not set(action.cpuset) <= known:
            return Outcome(False, "bad cpuset", (result("refused", f"cpuset {action.cpuset} names CPUs "
                                                                     f"{action.node} does not have"),))
        pod.pinned = tuple(sorted(action.cpuset))
        return Outcome(True, "", (result("done"),))

    def set_allocatable(self, node: str, allocatable: Resources) -> bool:
        """Admission uses the (oversold) allocatable from now on."""
        if node not in self.nodes:
            return False
        self.allocatable[node] = allocatable
        return True

    # -- internals --------------------------------------------------------------
    def _bind_problem(self, pod: PodState | None, decision: PlacementDecision) -> Outcome | None:
        key, node = decision.event_key(), decision.node or ""
        if pod is None or pod.phase in ("waiting", "deleted"):
            return self._refused(decision, f"pod {key} is gone")
        if decision.uid and pod.request.uid and decision.uid != pod.request.uid:
            return self._refused(decision, f"pod {key} was replaced: uid is {pod.request.uid}")
        if pod.phase == "running":
            if pod.node == node and pod.decision_id == decision.decision_id:
                return Outcome(True, "already bound by this decision", (BindResult(
                    decision_id=decision.decision_id, namespace=decision.namespace, name=decision.name,
                    node=node, ok=True, reason="already bound by this decision"),))
            return self._refused(decision, f"pod {key} is already bound to node {pod.node}")
        if node not in self.nodes:
            return self._refused(decision, f"node {node} is gone")
        ask, held, allocatable = pod.request, self.requested_on(node), self.allocatable[node]
        for what, need, have, limit in (("cpu", ask.requests.cpu_milli, held.cpu_milli, allocatable.cpu_milli),
                                        ("memory", ask.requests.memory_mib, held.memory_mib, allocatable.memory_mib)):
            if have + need > limit:
                return self._refused(decision, f"node {node} admission: {what} {have} + {need} > allocatable {limit}")
        given = sum(g.milli for g in decision.gpus)
        if given != ask.gpu.total_milli or (ask.gpu.count and len(decision.gpus) != ask.gpu.count):
            return self._refused(decision, f"decision gives {len(decision.gpus)} GPU(s), {given} milli; "
                                           f"pod {key} asks {ask.gpu.count} × {ask.gpu.milli}")
        free = self.gpu_free(node)
        for share in decision.gpus:
            left = free.get(share.gpu)
            if left is None:
                return self._refused(decision, f"node {node} has no healthy GPU {share.gpu}")
            if share.milli > left:
                return self._refused(decision, f"GPU {share.gpu} on {node} has {left} milli left, "
                                               f"decision takes {share.milli}")
            free[share.gpu] = left - share.milli
        if ask.exclusive_cpus and sum(decision.numa_cpus.values()) * 1000 != ask.requests.cpu_milli:
            return self._refused(decision, f"decision gives {sum(decision.numa_cpus.values())} exclusive CPUs, "
                                           f"pod {key} asks {ask.requests.cpu_milli // 1000}")
        return None

    def _refused(self, decision: PlacementDecision, reason: str) -> Outcome:
        return Outcome(False, reason, (self.refuse(decision, reason),))

    def _start(self, pod: PodState, node: str, at: datetime, t_s: float, numa_cpus: dict[int, int],
               gpus: tuple[GpuShare, ...], assigned: tuple[int, ...]) -> None:
        pod.phase, pod.node, pod.numa_cpus, pod.gpus, pod.assigned = "running", node, numa_cpus, gpus, assigned
        pod.started_at, pod.started_s, pod.frozen, pod.pinned = at, t_s, False, None
        for share in gpus:
            self.gpu_used[node][share.gpu] = self.gpu_used[node].get(share.gpu, 0) + share.milli
        self._on_node[node].add(pod.key)
        if pod.spec.duration_s is not None:
            self._timed.add(pod.key)

    def _started_events(self, pod: PodState) -> tuple[Payload, ...]:
        running = pod.request.model_copy(update={
            "phase": "running", "node": pod.node, "numa_cpus": dict(pod.numa_cpus), "gpus": list(pod.gpus),
            "created_at": pod.created_at or pod.started_at, "started_at": pod.started_at})
        bound = running.model_copy(update={"phase": "bound", "started_at": None})
        events: list[Payload] = [bound, running]
        if pod.assigned:
            events.append(CpuAssignment(node=pod.node, pod=pod.key, cpuset=list(pod.assigned)))
        return tuple(events)

    def _delete(self, pod: PodState, at: datetime) -> list[Payload]:
        node = pod.node
        assert node is not None
        for share in pod.gpus:
            left = self.gpu_used[node].get(share.gpu, 0) - share.milli
            if left > 0:
                self.gpu_used[node][share.gpu] = left
            else:
                self.gpu_used[node].pop(share.gpu, None)
        self._on_node[node].discard(pod.key)
        self._timed.discard(pod.key)
        events: list[Payload] = [pod.request.model_copy(update={
            "phase": "deleted", "node": node, "gpus": list(pod.gpus), "numa_cpus": dict(pod.numa_cpus),
            "created_at": pod.created_at or at, "started_at": pod.started_at})]
        if pod.assigned:
            events.append(CpuAssignment(node=node, pod=pod.key, cpuset=list(pod.assigned), released=True))
        pod.phase, pod.assigned, pod.pinned, pod.frozen = "deleted", (), None, False
        return events
