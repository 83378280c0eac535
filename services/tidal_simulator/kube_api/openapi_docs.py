"""The OpenAPI v3 documents kubectl reads before `kubectl apply` of a
custom resource (pure): the root `/openapi/v3` naming one document per
group version, and per group version the PATCH operations of each kind,
tagged with its group-version-kind, taking the `fieldValidation` query
parameter (so kubectl leaves validation to the server, which checks the
CRD's schema) and merge patches only (so kubectl sends JSON merge
patches, as for any custom resource). Only what kubectl looks up is
there; `/openapi/v2` stays absent."""

from __future__ import annotations

from typing import Any

QUERY = ("fieldValidation", "fieldManager", "dryRun")


def root(crds: list[Any]) -> dict[str, Any]:
    """GET /openapi/v3."""
    versions = sorted({(c.group, c.version) for c in crds})
    return {"paths": {f"apis/{g}/{v}": {"serverRelativeURL": f"/openapi/v3/apis/{g}/{v}"} for g, v in versions}}


def group_version(crds: list[Any]) -> dict[str, Any]:
    """GET /openapi/v3/apis/{group}/{version}: `crds` are that group version's."""
    paths, schemas = {}, {}
    for crd in crds:
        gvk = {"group": crd.group, "version": crd.version, "kind": crd.kind}
        name = f"{'.'.join(reversed(crd.group.split('.')))}.{crd.version}.{crd.kind}"
        schemas[name] = {**crd.schema, "x-kubernetes-group-version-kind": [gvk]}
        ref = {"$ref": f"#/components/schemas/{name}"}
        scope = f"/apis/{crd.group}/{crd.version}" + ("/namespaces/{namespace}" if crd.namespaced else "")
        parameters = [{"name": q, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for q in QUERY]
        patch = {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "patch", "parameters": parameters,
                 "requestBody": {"content": {"application/merge-patch+json": {"schema": {"type": "object"}},
                                             "application/json-patch+json": {"schema": {"type": "object"}}}},
                 "responses": {"200": {"content": {"application/json": {"schema": ref}}}}}
        post = {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "post", "parameters": parameters,
                "requestBody": {"content": {"application/json": {"schema": ref}}},
                "responses": {"201": {"content": {"application/json": {"schema": ref}}}}}
        paths[f"{scope}/{crd.plural}"] = {"post": post}
        paths[f"{scope}/{crd.plural}/{{name}}"] = {"patch": patch}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.30.0"}, "paths": paths,
            "components": {"schemas": schemas}}
