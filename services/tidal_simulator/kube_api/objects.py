"""Pod and Node objects as a user or a kubelet would create them (pure):
the builders tests and the simulator use to fill the API server."""

from __future__ import annotations

import uuid
from typing import Any

from .protocol import now_stamp


def qos_class(requests: dict[str, str], limits: dict[str, str] | None) -> str:
    """The QoS class the API server stamps: Guaranteed when limits equal the
    requests for CPU and memory, BestEffort when nothing is asked, else Burstable."""
    if not requests and not limits:
        return "BestEffort"
    if limits and set(limits) >= {"cpu", "memory"} and all(limits.get(k) == v for k, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def pod_object(name: str, namespace: str = "default", *, scheduler: str = "tidal", cpu: str | None = "1",
               memory: str | None = "1Gi", limits: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
               node: str | None = None, phase: str = "Pending", priority: int | None = None,
               qos_class_: str | None = None, spec: dict[str, Any] | None = None, uid: str | None = None
               ) -> dict[str, Any]:
    """A Pod with one container asking `cpu` and `memory` (and `limits`)."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    pod_spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [
        {"name": "app", "image": "busybox", "resources": resources}]}
    if priority is not None:
        pod_spec["priority"] = priority
    if node:
        pod_spec["nodeName"] = node
    pod_spec.update(spec or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4()),
                         "creationTimestamp": now_stamp(), "labels": dict(labels or {}),
                         "annotations": dict(annotations or {}),
                         "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": pod_spec, "status": {"phase": phase, "qosClass": qos_class_ or qos_class(requests, limits)}}


def node_object(name: str, *, cpu: str = "8", memory: str = "32Gi", gpus: int = 0,
                labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
                allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    """A Ready Node with `cpu`, `memory` and `gpus` (`nvidia.com/gpu`) of capacity."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now_stamp(),
                         "labels": {"kubernetes.io/hostname": name, **(labels or {})}, "annotations": {}},
            "spec": {"taints": list(taints or [])} if taints else {},
            "status": {"capacity": capacity, "allocatable": {**capacity, **(allocatable or {})},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
