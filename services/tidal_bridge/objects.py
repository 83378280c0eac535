"""Request bodies the bridge sends to the API server (pure, plain dicts in
the API's JSON shape; kubernetes-asyncio serialises dicts as they are).

Patches are JSON merge patches (`application/merge-patch+json`): they work
for every resource, and a key set to null removes it. A patch that carries
`metadata.resourceVersion` is refused with 409 when the object changed
since it was read, which makes read-modify-write of a list (taints) safe.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

INVALID_ANNOTATION = "TidalInvalidAnnotation"
DECISION_UNREADABLE = "TidalDecisionUnreadable"
SCHEDULED = "Scheduled"
COMPONENT = "tidal-bridge"


def taints_patch(taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
    """Replace the node's taints, only if it is still at `resource_version`."""
    return {"metadata": {"resourceVersion": resource_version}, "spec": {"taints": taints}}


def binding_body(namespace: str, name: str, node: str, uid: str = "",
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A core/v1 Binding; with `uid` the API server refuses it if the pod
    was replaced by another of the same name. Its `annotations` are merged
    into the pod's in the same update that sets the node."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def eviction_body(namespace: str, name: str, uid: str = "") -> dict[str, Any]:
    """A policy/v1 Eviction (PodDisruptionBudgets are honoured, never forced)."""
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


def pod_event(pod: dict[str, Any], *, reason: str, message: str, now: datetime,
              kind: str = "Warning", host: str = "", name: str | None = None, count: int = 1) -> dict[str, Any]:
    """A core/v1 Event about a pod, seen `count` times. Its name, unless given, is derived from
    (pod uid, reason, message), so re-reporting the same thing (another
    replica, a restart) collides with 409 instead of repeating it."""
    meta = pod.get("metadata") or {}
    digest = hashlib.sha256(f"{meta.get('uid')}/{reason}/{message}".encode()).hexdigest()[:16]
    stamp = now.isoformat().replace("+00:00", "Z")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name or f"{meta.get('name', 'pod')[:200]}.{digest}", "namespace": meta.get("namespace")},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
                           "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                           "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message[:1024], "type": kind, "count": count,
        "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": COMPONENT, **({"host": host} if host else {})},
        "reportingComponent": f"tidal.dev/{COMPONENT}", "reportingInstance": host or COMPONENT,
    }
