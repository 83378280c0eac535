"""What `kubectl apply --server-side -f` reads before it applies the
built-in kinds the stand-in stores (`server_side_apply.BUILTIN`), pure:

- discovery: their groups in `/apis`, their resources in `/api/v1` and in
  `/apis/{group}/{version}`, so kubectl maps each kind to its URL;
- an OpenAPI v3 document per group version of every kind it applies
  (`server_side_apply.APPLIED`: these, pods and nodes, CRDs and webhook
  configurations), whose PATCH operations take the `fieldValidation` query
  parameter, so kubectl leaves validation to the server instead of
  fetching `/openapi/v2` (which the stand-in does not serve).
"""

from __future__ import annotations

from typing import Any

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def groups(builtin: dict[tuple[str, str, str], tuple[str, bool]]) -> dict[str, str]:
    """group -> version of the built-in groups (not the core group)."""
    return {group: version for group, version, _ in builtin if group}


def _resource(plural: str, kind: str, namespaced: bool) -> dict[str, Any]:
    return {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind, "verbs": VERBS}


def core_resources(served: dict[str, Any], builtin: dict[tuple[str, str, str], tuple[str, bool]]) -> dict[str, Any]:
    """GET /api/v1: the server's own resources (`served`) and the core built-in kinds."""
    extra = [_resource(plural, kind, namespaced) for (group, _, plural), (kind, namespaced) in builtin.items()
             if not group]
    return {**served, "resources": [*served["resources"], *extra]}


def group_resources(group: str, version: str,
                    builtin: dict[tuple[str, str, str], tuple[str, bool]]) -> dict[str, Any] | None:
    """GET /apis/{group}/{version} of a built-in group, or None for another."""
    resources = [_resource(plural, kind, namespaced) for (g, v, plural), (kind, namespaced) in builtin.items()
                 if (g, v) == (group, version)]
    if not resources:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
            "resources": resources}


def openapi_paths(applied: dict[tuple[str, str, str], tuple[str, bool]]) -> dict[str, Any]:
    """The entries of the root (GET /openapi/v3) for the group versions of `applied`."""
    paths = {}
    for group, version in sorted({(g, v) for g, v, _ in applied}):
        name = f"apis/{group}/{version}" if group else f"api/{version}"
        paths[name] = {"serverRelativeURL": f"/openapi/v3/{name}"}
    return paths


def openapi(group: str, version: str, applied: dict[tuple[str, str, str], tuple[str, bool]]) -> dict[str, Any] | None:
    """GET /openapi/v3/api/v1 or /openapi/v3/apis/{group}/{version}: a PATCH
    operation per kind of `applied` there, tagged with its group-version-kind,
    taking `fieldValidation`, `fieldManager` and `force`; None for another group."""
    kinds = {plural: scope for (g, v, plural), scope in applied.items() if (g, v) == (group, version)}
    if not kinds:
        return None
    parameters = [{"name": q, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                  for q in ("fieldValidation", "fieldManager", "force", "dryRun")]
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    paths = {}
    for plural, (kind, namespaced) in sorted(kinds.items()):
        scope = base + ("/namespaces/{namespace}" if namespaced else "")
        paths[f"{scope}/{plural}/{{name}}"] = {"patch": {
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
            "x-kubernetes-action": "patch", "parameters": parameters,
            "requestBody": {"content": {"application/apply-patch+yaml": {"schema": {"type": "object"}},
                                        "application/merge-patch+json": {"schema": {"type": "object"}},
                                        "application/strategic-merge-patch+json": {"schema": {"type": "object"}}}},
            "responses": {"200": {"content": {"application/json": {"schema": {"type": "object"}}}}}}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.30.0"}, "paths": paths}
