"""The simulated machines (pure): which pod runs where, holding which GPUs
and exclusive CPUs, frozen or not, pinned to which cpuset, and which node
is tainted. The kubelets (`kubelet.py`) drive it from what happens in the
API server; it publishes nothing.

Admission (`admission`) checks what a node's kubelet, device plugin and
node agent would before the pod may run there: the node exists; its
(possibly oversold) allocatable still covers every pod's CPU and memory
requests; the decision written on the pod gives the GPUs asked, each
existing, healthy and with the milli left; its exclusive CPUs can be taken
per NUMA node from the shared pool (by the node's agent, `agents.py`). A
refused pod changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from tidal_schemas import GpuShare, NodeAction, Resources
from tidal_schemas.decision_codec import HeldDecision

from .agents import NodeAgent, make_agent
from .pods import SimPod
from .workload import SimNode, SimPodSpec

GPU_MILLI = 1000
AGENT_ACTIONS = ("freeze", "thaw", "set-cpuset")


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
    def request(self) -> SimPod:
        return self.spec.pod


class ClusterModel:
    """Nodes and pods of one simulation; see the module docstring."""

    def __init__(self, nodes: Iterable[SimNode], pods: Iterable[SimPodSpec]) -> None:
        self.nodes: dict[str, SimNode] = {n.topology.node: n for n in nodes}
        self.allocatable: dict[str, Resources] = {k: n.topology.allocatable for k, n in self.nodes.items()}
        self.taints: dict[str, set[str]] = {k: set() for k in self.nodes}
        self.gpu_used: dict[str, dict[str, int]] = {k: {} for k in self.nodes}
        self.gpu_model = {k: {g.id: g.model for g in n.topology.gpus} for k, n in self.nodes.items()}
        self.agents: dict[str, NodeAgent] = {k: make_agent(n.topology) for k, n in self.nodes.items()}
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
        return self.agents[node].shared_pool()

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

    # -- pods arriving, starting, leaving --------------------------------------
    def arrive(self, key: str, at: datetime) -> None:
        """The pod is created (pending)."""
        pod = self.pods[key]
        pod.phase, pod.created_at = "pending", at

    def admission(self, key: str, node: str, held: HeldDecision | None) -> str | None:
        """Why `node` cannot run pod `key` as `held` says (None: it can); see
        the module docstring."""
        pod = self.pods.get(key)
        if pod is None or pod.phase != "pending":
            return f"pod {key} is not pending here ({pod.phase if pod else 'unknown'})"
        if node not in self.nodes:
            return f"node {node} does not exist"
        ask, used, allocatable = pod.request, self.requested_on(node), self.allocatable[node]
        for what, need, have, limit in (("cpu", ask.requests.cpu_milli, used.cpu_milli, allocatable.cpu_milli),
                                        ("memory", ask.requests.memory_mib, used.memory_mib, allocatable.memory_mib)):
            if have + need > limit:
                return f"node {node}: {what} {have} + {need} > allocatable {limit}"
        if (ask.gpu.count or ask.exclusive_cpus) and held is None:
            return f"pod {key} asks GPUs or exclusive CPUs and carries no decision naming them"
        gpus = held.gpus if held else ()
        given = sum(g.milli for g in gpus)
        if given != ask.gpu.total_milli or (ask.gpu.count and len(gpus) != ask.gpu.count):
            return f"decision gives {len(gpus)} GPU(s), {given} milli; pod {key} asks {ask.gpu.count} × {ask.gpu.milli}"
        free = self.gpu_free(node)
        for share in gpus:
            left = free.get(share.gpu)
            if left is None:
                return f"node {node} has no healthy GPU {share.gpu}"
            if share.milli > left:
                return f"GPU {share.gpu} on {node} has {left} milli left, decision takes {share.milli}"
            free[share.gpu] = left - share.milli
        numa_cpus = held.numa_cpus if held else {}
        if ask.exclusive_cpus and sum(numa_cpus.values()) * 1000 != ask.requests.cpu_milli:
            return f"decision gives {sum(numa_cpus.values())} exclusive CPUs, pod {key} asks " \
                   f"{ask.requests.cpu_milli // 1000}"
        return None

    def start(self, key: str, node: str, held: HeldDecision | None, at: datetime, t_s: float
              ) -> tuple[tuple[int, ...], str]:
        """Run an admitted pod as `held` says; (its exclusive CPUs, "") or
        ((), why) when its node's agent cannot give them (nothing changed)."""
        pod = self.pods[key]
        numa_cpus = dict(held.numa_cpus) if held else {}
        assigned: tuple[int, ...] = ()
        if pod.request.exclusive_cpus:
            assigned, why = self.agents[node].assign(key, numa_cpus)
            if not assigned:
                return (), f"node {node} cannot give exclusive CPUs {numa_cpus}: {why}"
        gpus = tuple(GpuShare(gpu=g.gpu, milli=g.milli, model=self.gpu_model[node].get(g.gpu, ""))
                     for g in (held.gpus if held else ()))
        self._start(pod, node, at, t_s, numa_cpus, gpus, assigned)
        pod.decision_id = held.decision_id if held else None
        return assigned, ""

    def place(self, key: str, node: str, at: datetime, t_s: float) -> tuple[dict[int, int], tuple[GpuShare, ...], str]:
        """Start a pod already running when the simulation begins, on `node`:
        the first GPUs with room, exclusive CPUs as the node's agent packs
        them, its cpuset pinned to `pin_numa` when given. (NUMA CPU counts,
        GPUs, "") — or with the reason it cannot, nothing changed."""
        pod = self.pods[key]
        ask, topology = pod.request, self.nodes[node].topology
        free = self.gpu_free(node)
        fitting = [g for g, left in free.items() if left >= ask.gpu.milli][:ask.gpu.count] if ask.gpu.count else []
        if len(fitting) < ask.gpu.count:
            return {}, (), f"pod {key}: node {node} has not {ask.gpu.count} GPUs with {ask.gpu.milli} milli left"
        assigned: tuple[int, ...] = ()
        numa_cpus: dict[int, int] = {}
        if ask.exclusive_cpus:
            assigned, why = self.agents[node].assign_count(key, ask.requests.cpu_milli // 1000)
            if not assigned:
                return {}, (), f"pod {key}: node {node}: {why}"
            numa_of = {c.cpu: c.numa for c in topology.cpus}
            for cpu in assigned:
                numa_cpus[numa_of[cpu]] = numa_cpus.get(numa_of[cpu], 0) + 1
        gpus = tuple(GpuShare(gpu=g, milli=ask.gpu.milli, model=self.gpu_model[node][g]) for g in fitting)
        pod.phase, pod.created_at = "pending", at
        self._start(pod, node, at, t_s, numa_cpus, gpus, assigned)
        if pod.spec.pin_numa:
            pod.pinned = tuple(sorted(c.cpu for c in topology.cpus if c.numa in pod.spec.pin_numa))
        return numa_cpus, gpus, ""

    def due(self, t_s: float) -> list[str]:
        """Running pods whose run time is over at `t_s`."""
        return [key for key in sorted(self._timed)
                if t_s >= (self.pods[key].started_s or 0.0) + (self.pods[key].spec.duration_s or 0.0)]

    def delete(self, key: str) -> tuple[int, ...]:
        """The pod is gone: what it held goes back; the exclusive CPUs it had."""
        pod = self.pods.get(key)
        if pod is None or pod.phase in ("waiting", "deleted"):
            return ()
        node, released = pod.node, ()
        if node is not None and pod.phase == "running":
            for share in pod.gpus:
                left = self.gpu_used[node].get(share.gpu, 0) - share.milli
                if left > 0:
                    self.gpu_used[node][share.gpu] = left
                else:
                    self.gpu_used[node].pop(share.gpu, None)
            self._on_node[node].discard(key)
            released = self.agents[node].release(key)
        self._timed.discard(key)
        pod.phase, pod.assigned, pod.pinned, pod.frozen = "deleted", (), None, False
        return released

    # -- the node agent's actions ------------------------------------------------
    def act(self, action: NodeAction) -> tuple[str, str]:
        """Carry out a freeze, thaw or set-cpuset on a pod's (simulated)
        cgroup; (status, reason) as the agent reports it."""
        if action.node not in self.nodes:
            return "failed", f"no node {action.node} in the simulation"
        if action.dry_run:
            return "skipped", "dry run: not executed"
        pod = self.pods.get(action.pod or "")
        if pod is None or pod.phase != "running":
            return "unknown-pod", f"no running pod {action.pod}"
        if pod.node != action.node:
            return "refused", f"pod {action.pod} runs on {pod.node}"
        if action.kind in ("freeze", "thaw"):
            pod.frozen = action.kind == "freeze"
            return "done", ""
        if action.target_numa is not None:  # a move: the node's agent chooses the CPUs
            moved, why = self.agents[action.node].move(pod.key, pod.request.uid, action.target_numa,
                                                       action.cpu_count)
            if not moved:
                return "refused", why
            cpus = tuple(self.agents[action.node].cpuset(pod.key))
            if pod.assigned:
                numa_of = {c.cpu: c.numa for c in self.nodes[action.node].topology.cpus}
                pod.assigned, pod.pinned = cpus, None
                pod.numa_cpus = {n: sum(1 for c in cpus if numa_of[c] == n)
                                 for n in sorted({numa_of[c] for c in cpus})}
            else:
                pod.pinned = cpus
            return "done", why
        known = {c.cpu for c in self.nodes[action.node].topology.cpus}
        if not set(action.cpuset) <= known:  # a stand-in's concrete cpuset (the schema allows it)
            return "refused", f"cpuset {action.cpuset} names CPUs {action.node} does not have"
        pod.pinned = tuple(sorted(action.cpuset))
        return "done", ""

    # -- the node object -----------------------------------------------------------
    def set_taints(self, node: str, keys: Iterable[str]) -> tuple[set[str], set[str]]:
        """The node's taint keys are now `keys`; (added, removed)."""
        now, before = set(keys), self.taints.get(node, set())
        self.taints[node] = now
        return now - before, before - now

    def set_allocatable(self, node: str, allocatable: Resources) -> bool:
        """Admission uses the (oversold) allocatable from now on."""
        if node not in self.nodes:
            return False
        self.allocatable[node] = allocatable
        return True

    # -- internals --------------------------------------------------------------
    def _start(self, pod: PodState, node: str, at: datetime, t_s: float, numa_cpus: dict[int, int],
               gpus: tuple[GpuShare, ...], assigned: tuple[int, ...]) -> None:
        pod.phase, pod.node, pod.numa_cpus, pod.gpus, pod.assigned = "running", node, numa_cpus, gpus, assigned
        pod.started_at, pod.started_s, pod.frozen, pod.pinned = at, t_s, False, None
        for share in gpus:
            self.gpu_used[node][share.gpu] = self.gpu_used[node].get(share.gpu, 0) + share.milli
        self._on_node[node].add(pod.key)
        if pod.spec.duration_s is not None:
            self._timed.add(pod.key)
