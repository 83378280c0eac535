"""What `kubectl` needs beyond plain REST (pure): discovery documents, and
the server-side `Table` rendering it asks for (`Accept: ...;as=Table`) to
print `kubectl get pods -o wide` with its NODE column.

Columns follow the API server's own printers (pkg/printers/internalversion):
pods NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED NODE READINESS GATES,
nodes NAME STATUS ROLES AGE VERSION | INTERNAL-IP EXTERNAL-IP OS-IMAGE
KERNEL-VERSION CONTAINER-RUNTIME (after | only with -o wide: priority 1).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from tidal_clock import now_utc

VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.0-tidal-simulator", "platform": "linux/amd64"}
RESOURCES = [  # (name, kind, namespaced, verbs)
    ("pods", "Pod", True, ["create", "delete", "get", "list", "patch", "watch"]),
    ("pods/binding", "Binding", True, ["create"]),
    ("pods/eviction", "Eviction", True, ["create"]),
    ("pods/status", "Pod", True, ["get", "patch", "update"]),
    ("nodes", "Node", False, ["get", "list", "patch", "watch"]),
    ("nodes/status", "Node", False, ["get", "patch", "update"]),
    ("events", "Event", True, ["create", "get", "list", "patch"]),
]
# Custom resources are listed per group (`group_resources`) once their CRD
# is registered (custom.py); the bridge's rights over Tidal's own are
# k8s/base/rbac-bridge.yaml's.


def api_versions(address: str) -> dict[str, Any]:
    """GET /api."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def api_groups(served: dict[str, str] | None = None) -> dict[str, Any]:
    """GET /apis: apiextensions and the groups of registered custom
    resources (`served`: group -> version)."""
    versions = {"apiextensions.k8s.io": "v1", **(served or {})}
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": group, "versions": [{"groupVersion": f"{group}/{version}", "version": version}],
         "preferredVersion": {"groupVersion": f"{group}/{version}", "version": version}}
        for group, version in versions.items()]}


def apiextensions_resources() -> dict[str, Any]:
    """GET /apis/apiextensions.k8s.io/v1."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apiextensions.k8s.io/v1", "resources": [
        {"name": "customresourcedefinitions", "singularName": "customresourcedefinition", "namespaced": False,
         "kind": "CustomResourceDefinition", "shortNames": ["crd", "crds"],
         "verbs": ["create", "delete", "get", "list"]}]}


def group_resources(group_version: str, crds: list[Any]) -> dict[str, Any]:
    """GET /apis/{group}/{version}: the custom resources (`custom.Crd`) served there."""
    resources = []
    for crd in crds:
        names = crd.document["spec"]["names"]
        resources.append({"name": crd.plural, "singularName": names.get("singular", crd.kind.lower()),
                          "namespaced": crd.namespaced, "kind": crd.kind, "shortNames": names.get("shortNames", []),
                          "categories": names.get("categories", []),
                          "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
        if crd.status_subresource:
            resources.append({"name": f"{crd.plural}/status", "singularName": "", "namespaced": crd.namespaced,
                              "kind": crd.kind, "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


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


def json_path(obj: Any, path: str) -> Any:
    """The value at a printer column's JSONPath: `.a.b`, `.a[0]`, and
    `.a[?(@.k=="v")].b` (the first match), or None."""
    for step in re.findall(r'\.([\w-]+)|\[(\d+)\]|\[\?\(@\.([\w-]+)==["\']([^"\']*)["\']\)\]', path):
        name, index, key, wanted = step
        if name:
            obj = obj.get(name) if isinstance(obj, dict) else None
        elif index:
            obj = obj[int(index)] if isinstance(obj, list) and int(index) < len(obj) else None
        else:
            obj = next((o for o in obj if isinstance(o, dict) and str(o.get(key)) == wanted), None) \
                if isinstance(obj, list) else None
    return obj


def custom_table(columns: list[dict[str, Any]], items: list[dict[str, Any]], resource_version: str,
                 include_object: str = "Metadata") -> dict[str, Any]:
    """Custom resources as a Table: NAME, then the CRD's additionalPrinterColumns
    (a `date` column shown as an age, as apiextensions-apiserver does)."""
    now = now_utc()
    definitions = [_column("Name", format="name")] + [
        {"name": c["name"], "type": c.get("type", "string"), "format": c.get("format", ""),
         "description": c.get("description", ""), "priority": c.get("priority", 0)} for c in columns]
    rows = []
    for item in items:
        cells: list[Any] = [item["metadata"]["name"]]
        for column in columns:
            value = json_path(item, column["jsonPath"])
            cells.append(_age(value, now) if column.get("type") == "date" and value else value)
        obj = item if include_object == "Object" else {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]}
        rows.append({"cells": cells, "object": obj})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": definitions, "rows": rows}


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
    now = now_utc()
    rows = []
    for item in items:
        obj = item if include_object == "Object" else {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]}
        rows.append({"cells": CELLS[resource](item, now), "object": obj})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": COLUMNS[resource], "rows": rows}
