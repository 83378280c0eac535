"""The simulated machines (pure): which pod runs where, holding which GPUs,
each machine's pod cgroups (`cgroup_tree.py`: created when a pod starts,
removed when it goes; pinned, frozen and thawed by the node agents,
`agents.py`), which node is tainted, and the node object's allocatable
(for the report's figures). The kubelets (`kubelet.py`) drive it from what
happens in the API server; it publishes nothing and reads no decision.

A pod starts with the GPU shares its containers were handed (the device
plugin's `Allocate`, read by the kubelet stand-in); which CPUs it runs on is
the node agent's business (its cpuset writes). Admission is the kubelet's
(`kubelet_admit.py`), not the model's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from tidal_schemas import GpuShare, Resources
from tidal_policy.cpu_pick import pick_cpus

from .cgroup_tree import MemoryCgroups
from .pods import SimPod
from .workload import SimNode, SimPodSpec

GPU_MILLI = 1000


@dataclass
class PodState:
    """One pod and what it holds now. Phases: waiting (not arrived yet) →
    pending → running → deleted, or pending → failed (its kubelet rejected it)."""

    spec: SimPodSpec
    phase: str = "waiting"
    node: str | None = None
    numa_cpus: dict[int, int] = field(default_factory=dict)
    gpus: tuple[GpuShare, ...] = ()
    created_at: datetime | None = None
    started_at: datetime | None = None
    started_s: float | None = None

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
        self.cgroups = {k: MemoryCgroups(tuple(c.cpu for c in n.topology.cpus),
                                         tuple(m.id for m in n.topology.numa_nodes)) for k, n in self.nodes.items()}
        self._taken_at_start: dict[str, set[int]] = {k: set() for k in self.nodes}
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

    def cpuset(self, pod: PodState) -> list[int]:
        """The CPUs a running pod runs on: its cgroup's cpuset."""
        found = self.cgroups[pod.node].pod_cpuset(pod.request.uid) if pod.node in self.cgroups else None
        return found or []

    def frozen(self, pod: PodState) -> bool:
        """Whether a running pod's cgroup is frozen."""
        return bool(pod.node in self.cgroups and self.cgroups[pod.node].pod_frozen(pod.request.uid))

    def gpu_free(self, node: str) -> dict[str, int]:
        """Milli-GPU left on each healthy GPU of `node`."""
        used = self.gpu_used[node]
        return {g.id: GPU_MILLI - used.get(g.id, 0) for g in self.nodes[node].topology.gpus if g.healthy}

    # -- pods arriving, starting, leaving --------------------------------------
    def arrive(self, key: str, at: datetime) -> None:
        """The pod is created (pending)."""
        pod = self.pods[key]
        pod.phase, pod.created_at = "pending", at

    def start(self, key: str, node: str, gpus: Iterable[tuple[str, int]], at: datetime, t_s: float) -> None:
        """Run a pod its kubelet admitted, with the GPU shares (GPU id,
        milli) its containers were handed: its GPUs, its cgroup."""
        pod = self.pods[key]
        shares = tuple(GpuShare(gpu=g, milli=m, model=self.gpu_model[node].get(g, "")) for g, m in gpus)
        self._start(pod, node, at, t_s, {}, shares)

    def fail(self, key: str) -> None:
        """Its kubelet rejected the pod: it holds nothing and never runs."""
        pod = self.pods.get(key)
        if pod is not None and pod.phase == "pending":
            pod.phase = "failed"

    def place(self, key: str, node: str, at: datetime, t_s: float) -> tuple[dict[int, int], tuple[GpuShare, ...], str]:
        """Start a pod already running when the simulation begins, on `node`:
        the first GPUs with room, and exclusive CPUs counted per NUMA node
        as kubelet's allocator packs them among those not given to an
        earlier such pod (its node's agent adopts them from the decision
        written on the pod). (NUMA CPU counts, GPUs, "") — or with the
        reason it cannot, nothing changed."""
        pod = self.pods[key]
        ask, topology = pod.request, self.nodes[node].topology
        free = self.gpu_free(node)
        fitting = [g for g, left in free.items() if left >= ask.gpu.milli][:ask.gpu.count] if ask.gpu.count else []
        if len(fitting) < ask.gpu.count:
            return {}, (), f"pod {key}: node {node} has not {ask.gpu.count} GPUs with {ask.gpu.milli} milli left"
        numa_cpus: dict[int, int] = {}
        if ask.exclusive_cpus:
            free = frozenset(c.cpu for c in topology.cpus) - set(topology.reserved_cpus) - self._taken_at_start[node]
            picked = pick_cpus(topology.cpus, free, ask.requests.cpu_milli // 1000)
            if picked.cpus is None:
                return {}, (), f"pod {key}: node {node}: {picked.reason}"
            self._taken_at_start[node] |= set(picked.cpus)
            numa_of = {c.cpu: c.numa for c in topology.cpus}
            for cpu in picked.cpus:
                numa_cpus[numa_of[cpu]] = numa_cpus.get(numa_of[cpu], 0) + 1
        gpus = tuple(GpuShare(gpu=g, milli=ask.gpu.milli, model=self.gpu_model[node][g]) for g in fitting)
        pod.phase, pod.created_at = "pending", at
        self._start(pod, node, at, t_s, numa_cpus, gpus)
        return numa_cpus, gpus, ""

    def due(self, t_s: float) -> list[str]:
        """Running pods whose run time is over at `t_s`."""
        return [key for key in sorted(self._timed)
                if t_s >= (self.pods[key].started_s or 0.0) + (self.pods[key].spec.duration_s or 0.0)]

    def delete(self, key: str) -> None:
        """The pod is gone: its GPUs go back, its cgroup goes (its node's
        agent gives its CPUs back when it reads of the deletion)."""
        pod = self.pods.get(key)
        if pod is None or pod.phase in ("waiting", "deleted"):
            return
        node = pod.node
        if node is not None and pod.phase == "running":
            for share in pod.gpus:
                left = self.gpu_used[node].get(share.gpu, 0) - share.milli
                if left > 0:
                    self.gpu_used[node][share.gpu] = left
                else:
                    self.gpu_used[node].pop(share.gpu, None)
            self._on_node[node].discard(key)
            self.cgroups[node].remove_pod(pod.request.uid)
        self._timed.discard(key)
        pod.phase = "deleted"

    # -- the node object -----------------------------------------------------------
    def set_taints(self, node: str, keys: Iterable[str]) -> tuple[set[str], set[str]]:
        """The node's taint keys are now `keys`; (added, removed)."""
        now, before = set(keys), self.taints.get(node, set())
        self.taints[node] = now
        return now - before, before - now

    def set_allocatable(self, node: str, allocatable: Resources) -> bool:
        """The node object's `status.allocatable` is now `allocatable` (the report's figures read it)."""
        if node not in self.nodes:
            return False
        self.allocatable[node] = allocatable
        return True

    # -- internals --------------------------------------------------------------
    def _start(self, pod: PodState, node: str, at: datetime, t_s: float, numa_cpus: dict[int, int],
               gpus: tuple[GpuShare, ...]) -> None:
        pod.phase, pod.node, pod.numa_cpus, pod.gpus = "running", node, numa_cpus, gpus
        pod.started_at, pod.started_s = at, t_s
        self.cgroups[node].create_pod(pod.request.uid)
        for share in gpus:
            self.gpu_used[node][share.gpu] = self.gpu_used[node].get(share.gpu, 0) + share.milli
        self._on_node[node].add(pod.key)
        if pod.spec.duration_s is not None:
            self._timed.add(pod.key)
