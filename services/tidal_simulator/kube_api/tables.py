"""What `kubectl` needs beyond plain REST (pure): discovery documents, and
the server-side `Table` rendering it asks for (`Accept: ...;as=Table`) to
print `kubectl get pods -o wide` with its NODE column.

Columns follow the API server's own printers (pkg/printers/internalversion):
pods NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED NODE READINESS GATES,
nodes NAME STATUS ROLES AGE VERSION | INTERNAL-IP EXTERNAL-IP OS-IMAGE
KERNEL-VERSION CONTAINER-RUNTIME (after | only with -o wide: priority 1).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.0-tidal-simulator", "platform": "linux/amd64"}
RESOURCES = [  # (name, kind, namespaced, verbs)
    ("pods", "Pod", True, ["create", "delete", "get", "list", "patch", "watch"]),
    ("pods/binding", "Binding", True, ["create"]),
    ("pods/eviction", "Eviction", True, ["create"]),
    ("pods/status", "Pod", True, ["get", "patch", "update"]),
    ("nodes", "Node", False, ["get", "list", "patch", "watch"]),
    ("events", "Event", True, ["create", "get", "list", "patch"]),
]


def api_versions(address: str) -> dict[str, Any]:
    """GET /api."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def api_groups() -> dict[str, Any]:
    """GET /apis: no groups beyond the core one."""
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}


def core_resources() -> dict[str, Any]:
    """GET /api/v1."""
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": name, "singularName": "" if "/" in name else kind.lower(), "namespaced": namespaced, "kind": kind,
         "verbs": verbs, **({} if "/" in name else {"shortNames": {"pods": ["po"], "nodes": ["no"],
                                                                   "events": ["ev"]}[name]})}
        for name, kind, namespaced, verbs in RESOURCES]}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(stamp: str | None, now: datetime) -> str:
    try:
        seconds = int((now - datetime.fromisoformat((stamp or "").replace("Z", "+00:00"))).total_seconds())
    except ValueError:
        return "<unknown>"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _column(name: str, priority: int = 0, format: str = "") -> dict[str, Any]:
    return {"name": name, "type": "string", "format": format, "description": "", "priority": priority}


def _pod_cells(pod: dict[str, Any], now: datetime) -> list[Any]:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    phase = status.get("phase", "Pending")
    ready = len(containers) if phase == "Running" else 0
    shown = "Terminating" if meta.get("deletionTimestamp") else phase
    return [meta["name"], f"{ready}/{len(containers)}", shown, "0", _age(meta.get("creationTimestamp"), now),
            status.get("podIP") or "<none>", spec.get("nodeName") or "<none>", "<none>", "<none>"]


def _node_cells(node: dict[str, Any], now: datetime) -> list[Any]:
    meta, spec = node["metadata"], node.get("spec") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or [])
    state = ("Ready" if ready else "NotReady") + (",SchedulingDisabled" if spec.get("unschedulable") else "")
    return [meta["name"], state, "<none>", _age(meta.get("creationTimestamp"), now), "v1.30.0-kwok",
            "<none>", "<none>", "tidal-simulator", "<none>", "<none>"]


COLUMNS = {
    "pods": [_column("Name", format="name"), _column("Ready"), _column("Status"), _column("Restarts"),
             _column("Age"), _column("IP", 1), _column("Node", 1), _column("Nominated Node", 1),
             _column("Readiness Gates", 1)],
    "nodes": [_column("Name", format="name"), _column("Status"), _column("Roles"), _column("Age"),
              _column("Version"), _column("Internal-IP", 1), _column("External-IP", 1), _column("OS-Image", 1),
              _column("Kernel-Version", 1), _column("Container-Runtime", 1)],
}
CELLS = {"pods": _pod_cells, "nodes": _node_cells}


def table(resource: str, items: list[dict[str, Any]], resource_version: str, include_object: str = "Metadata"
          ) -> dict[str, Any] | None:
    """`items` as a `meta.k8s.io/v1 Table`, each row with its object's
    metadata (or the whole object with includeObject=Object); None for a
    resource without a printer (the caller answers with the plain list)."""
    if resource not in CELLS:
        return None
    now = datetime.now(timezone.utc)
    rows = []
    for item in items:
        obj = item if include_object == "Object" else {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]}
        rows.append({"cells": CELLS[resource](item, now), "object": obj})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": COLUMNS[resource], "rows": rows}
