"""Builders shared by the webhook tests: a node as the kubelet writes it,
an AdmissionReview of its status update, the MutatingWebhookConfiguration
that registers a webhook with the stand-in API server, a granted figure."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from tidal_schemas import NodeAllocatable, NodeAllocatables, Resources


def kubelet_node(name: str = "n1", cpu: str = "8", memory: str = "32Gi", annotations: dict | None = None,
                 labels: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "u-" + name, "resourceVersion": "7",
                         "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         **({"annotations": dict(annotations)} if annotations is not None else {})},
            "spec": {},
            "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def status_review(obj: dict, old: dict | None = None, *, user: str | None = None, operation: str = "UPDATE",
                  sub_resource: str = "status", uid: str | None = None) -> dict[str, Any]:
    name = obj["metadata"]["name"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid or str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Node"},
        "resource": {"group": "", "version": "v1", "resource": "nodes"}, "subResource": sub_resource,
        "name": name, "operation": operation,
        "userInfo": {"username": user if user is not None else f"system:node:{name}", "groups": ["system:nodes"]},
        "object": obj, "oldObject": old if old is not None else copy.deepcopy(obj)}}


def granted(*nodes: tuple[str, int, int]) -> NodeAllocatables:
    """node.allocatable for (node, cpu_milli, memory_mib) granted."""
    return NodeAllocatables(items=[NodeAllocatable(node=node, policy="factor",
                                                   capacity=Resources(cpu_milli=8000, memory_mib=32768),
                                                   allocatable=Resources(cpu_milli=cpu, memory_mib=memory))
                                   for node, cpu, memory in nodes])


def webhook_configuration(url: str, ca_bundle: str, *, name: str = "tidal-webhook", policy: str = "Ignore",
                          timeout: int = 2, operations: tuple[str, ...] = ("UPDATE",),
                          resources: tuple[str, ...] = ("nodes/status",)) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{"name": "node-allocatable.tidal.dev", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None", "failurePolicy": policy, "timeoutSeconds": timeout,
                          "matchPolicy": "Equivalent", "clientConfig": {"url": url, "caBundle": ca_bundle},
                          "rules": [{"operations": list(operations), "apiGroups": [""], "apiVersions": ["v1"],
                                     "resources": list(resources), "scope": "Cluster"}]}]}
