"""A simulated pod as its user asks for it (`SimPod`, plain data), and the
Kubernetes objects the simulated cluster holds for pods and nodes (pure).

The simulator never describes a pod the way Tidal reports it: it creates the
Pod object a user would submit — requests, a GPU pod's `tidal.dev/gpu-milli`
(count × milli, in requests and limits: docs/last-mile.md) and the other
`tidal.dev/` annotations and labels of `tidal_bridge.annotations` — and the
bridge reads it as it reads any pod. `tests/test_simulator_model.py` checks
that what the bridge reads is what was asked.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tidal_schemas import GpuAsk, NodeTopology, Resources

from .kube_api.objects import node_object
from .kubelet_admit import amount
from .kube_api.protocol import stamp

_UIDS = uuid.UUID("6a4f3a52-11b8-4d0c-9a0e-5f2a64c1d7b3")
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
GPU_RESOURCE = "tidal.dev/gpu-milli"  # the node agent's device plugin's resource
MAX_PODS = "110"  # the kubelet's default maxPods
SCHEDULER = "tidal"


def pod_uid(namespace: str, name: str, salt: str = "") -> str:
    """A uid derived from the pod's key (and a run salt): the same scenario
    names the same pods the same way."""
    return str(uuid.uuid5(_UIDS, f"{salt}/{namespace}/{name}"))


@dataclass(frozen=True)
class SimPod:
    """What a pod asks: requests, GPUs, exclusive CPUs, and who it is for."""

    namespace: str
    name: str
    uid: str
    requests: Resources
    gpu: GpuAsk = GpuAsk()
    tenant: str = "default"
    user: str = "default"
    qos: str = "BE"
    priority: int = 0
    evictable: bool = False
    exclusive_cpus: bool = False
    cpu_policy: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def event_key(self) -> str:
        return f"{self.namespace}/{self.name}"


def sim_pod(namespace: str, name: str, *, cpu_milli: int, memory_mib: int, gpu: GpuAsk = GpuAsk(),
            tenant: str = "default", user: str = "default", qos: str = "BE", priority: int = 0,
            evictable: bool = False, exclusive_cpus: bool = False, cpu_policy: str | None = None,
            labels: dict[str, str] | None = None) -> SimPod:
    """A pod's ask, with a uid derived from its key."""
    if exclusive_cpus and (cpu_milli <= 0 or cpu_milli % 1000):
        raise ValueError(f"exclusive CPUs need whole, non-zero CPU requests, got {cpu_milli}m")
    return SimPod(namespace, name, pod_uid(namespace, name), Resources(cpu_milli=cpu_milli, memory_mib=memory_mib),
                  gpu, tenant, user, qos, priority, evictable, exclusive_cpus, cpu_policy, dict(labels or {}))


def _asks(pod: SimPod) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(annotations, labels, limits) that say what `pod` asks beyond CPU and memory."""
    annotations: dict[str, str] = {}
    limits: dict[str, str] = {}
    gpu = pod.gpu
    if gpu.count:  # q ≤ 1000: one GPU of q milli; q > 1000: q / 1000 whole GPUs
        limits[GPU_RESOURCE] = str(gpu.total_milli)
        if gpu.models:
            annotations["tidal.dev/gpu-models"] = "|".join(gpu.models)
        if gpu.kind:
            annotations["tidal.dev/gpu-kind"] = gpu.kind
        if gpu.group:
            annotations["tidal.dev/gpu-group"] = gpu.group
    if pod.exclusive_cpus:
        annotations["tidal.dev/exclusive-cpus"] = "true"
    if pod.cpu_policy:
        annotations["tidal.dev/cpu-policy"] = pod.cpu_policy
    labels = {**pod.labels, "tidal.dev/tenant": pod.tenant, "tidal.dev/user": pod.user, "tidal.dev/qos": pod.qos}
    if pod.evictable:
        labels["tidal.dev/evictable"] = "true"
    return annotations, labels, limits


def pod_manifest(pod: SimPod, created: datetime, *, node: str | None = None, phase: str = "Pending",
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The Pod object a user submits for `pod` (already bound to `node`, in
    `phase`, with extra `annotations`, for a pod running before the start)."""
    asked, labels, limits = _asks(pod)
    requests = {"cpu": f"{pod.requests.cpu_milli}m", "memory": f"{pod.requests.memory_mib}Mi", **limits}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "priority": pod.priority, "containers": [
        {"name": "main", "image": "registry.k8s.io/pause:3.9",
         "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "creationTimestamp": stamp(created),
                         "labels": labels, "annotations": {**asked, **(annotations or {})}},
            "spec": spec, "status": {"phase": phase, "qosClass": "Burstable",
                                     **({"startTime": stamp(created)} if phase == "Running" else {})}}


def node_status(topology: NodeTopology, devices: dict[str, tuple[int, int]] | None = None) -> dict[str, Any]:
    """The status a machine's kubelet reports: its own capacity and
    allocatable (the reserved CPUs left out), and each device plugin
    resource's (capacity, allocatable) from `devices`."""
    capacity = {"cpu": f"{topology.capacity.cpu_milli}m", "memory": f"{topology.capacity.memory_mib}Mi",
                "pods": MAX_PODS}
    allocatable = {"cpu": f"{topology.allocatable.cpu_milli}m", "memory": f"{topology.allocatable.memory_mib}Mi",
                   "pods": MAX_PODS}
    for resource, (total, healthy) in sorted((devices or {}).items()):
        capacity[resource], allocatable[resource] = str(total), str(healthy)
    return {"capacity": capacity, "allocatable": allocatable}


def reported(status: dict[str, Any], node: dict[str, Any] | None) -> bool:
    """Whether the node object's capacity and allocatable say what `status` does."""
    stored = (node or {}).get("status") or {}
    for part in ("capacity", "allocatable"):
        mine, theirs = status[part], stored.get(part) or {}
        if all(theirs.get(k) == v for k, v in mine.items()):
            continue  # as written (the common case: parsing every node's figures each period costs)
        if {k: amount(k, v) for k, v in mine.items()} != {k: amount(k, v) for k, v in theirs.items() if k in mine}:
            return False
    return True


def node_manifest(topology: NodeTopology) -> dict[str, Any]:
    """The Node object of a simulated machine as its kubelet registers it,
    its GPUs as the node agent's device plugin advertises them (1000 units
    a GPU; a MIG instance's with its parent's health). The simulator's
    kubelets then write what their plugins list (`node_status`)."""
    obj = node_object(topology.node, labels={"tidal.dev/pool": topology.pool} if topology.pool else None)
    health = {g.id: g.healthy for g in topology.gpus}
    healthy = [g for g in topology.gpus if g.healthy and health.get(g.parent or g.id, True)]
    devices = {GPU_RESOURCE: (1000 * len(topology.gpus), 1000 * len(healthy))} if topology.gpus else {}
    obj["status"].update(node_status(topology, devices))
    return obj
