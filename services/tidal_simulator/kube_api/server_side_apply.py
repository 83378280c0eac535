"""Server-side apply on the simulated API server, what `kubectl apply
--server-side` sends for each object of a file:

    PATCH <the object's URL>?fieldManager=kubectl[&force=true]
    Content-Type: application/apply-patch+yaml

The object is created when absent (201) and merged into the live one
otherwise (200), its fields owned by the manager (`field_owners.py`: a
conflict with another manager's field is 409 unless forced). As
kube-apiserver does: no `fieldManager` is 422; a body whose apiVersion,
kind or name is not the URL's is 400; an object in a namespace that does
not exist is 404 (the namespace comes first: kustomize's order does that);
a kind the server does not serve is 404; an applied `status` is ignored
(it is the status subresource's; a custom resource without one keeps
it). Not played: dry runs, and the immutability of a pod's spec (an
apply may change it here).

What it applies to: pods and nodes (as stored for the rest of the server),
custom resources of a registered CRD (pruned and checked against its
schema as on create, `custom.py`), CRDs themselves (registered, so their
resources are served at once), MutatingWebhookConfigurations (validated,
`webhook_configs.py`), and the built-in kinds of the install manifests
(`BUILTIN`: namespaces, config maps, services, RBAC, workloads, budgets,
autoscalers, network policies), which the stand-in only stores: nothing
runs a Deployment here, and their schemas are checked by
kubernetes-validate in tests/test_install.py, not here. `GET` of one of
those, or their list, answers what is stored; their groups' discovery and
every applied kind's OpenAPI v3 document are served too (`builtin_docs.py`),
so the real `kubectl apply --server-side -f` works against the stand-in.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web

from . import builtin_docs, openapi_docs
from .custom import _admit as admit_custom_resource
from .field_owners import ApplyConflict, apply
from .protocol import not_found, now_stamp, status, status_body

if TYPE_CHECKING:
    from .server import KubeApiServer

APPLY = "application/apply-patch+yaml"
CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
WEBHOOKS = ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")
OTHER_KINDS = {CRDS[2]: "CustomResourceDefinition", WEBHOOKS[2]: "MutatingWebhookConfiguration"}
# (group, version, plural) -> (kind, namespaced), stored as they come
BUILTIN = {
    ("", "v1", "namespaces"): ("Namespace", False),
    ("", "v1", "configmaps"): ("ConfigMap", True),
    ("", "v1", "secrets"): ("Secret", True),
    ("", "v1", "serviceaccounts"): ("ServiceAccount", True),
    ("", "v1", "services"): ("Service", True),
    ("apps", "v1", "deployments"): ("Deployment", True),
    ("apps", "v1", "daemonsets"): ("DaemonSet", True),
    ("apps", "v1", "statefulsets"): ("StatefulSet", True),
    ("policy", "v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True),
    ("autoscaling", "v2", "horizontalpodautoscalers"): ("HorizontalPodAutoscaler", True),
    ("networking.k8s.io", "v1", "networkpolicies"): ("NetworkPolicy", True),
    ("rbac.authorization.k8s.io", "v1", "clusterroles"): ("ClusterRole", False),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"): ("ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io", "v1", "roles"): ("Role", True),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"): ("RoleBinding", True),
}
# every kind an apply reaches: the built-in ones, the server's own, CRDs and webhook configurations
APPLIED = {**BUILTIN, ("", "v1", "pods"): ("Pod", True), ("", "v1", "nodes"): ("Node", False),
           CRDS: ("CustomResourceDefinition", False), WEBHOOKS: ("MutatingWebhookConfiguration", False)}
INITIAL_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
_PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$")
NOT_SERVED = "the server could not find the requested resource"


def resource_name(group: str, plural: str) -> str:
    """The store's name of a resource: `plural` for the core group, else `plural.group`."""
    return f"{plural}.{group}" if group else plural


class ServerSideApply:
    """`await serve(request)`: the answer to an apply or to a GET of a stored
    built-in kind, or None for every other request (the server routes it)."""

    def __init__(self, server: "KubeApiServer") -> None:
        self.server = server
        self.store = server.store
        for (group, version, plural), (kind, _) in BUILTIN.items():
            self.store.objects.setdefault(resource_name(group, plural), {})
            self.store.kinds[resource_name(group, plural)] = (kind, f"{group}/{version}" if group else version)

    async def serve(self, request: web.Request) -> web.StreamResponse | None:
        if request.method == "GET" and (document := self._document(request.path)) is not None:
            return web.json_response(document)
        found = _PATH.match(request.path)
        if found is None:
            return None
        group, version = found["group"] or "", found["core"] or found["version"]
        ns, plural, name = found["ns"] or "", found["plural"], found["name"]
        if request.method == "GET" and (group, version, plural) in BUILTIN:
            return self._get(resource_name(group, plural), BUILTIN[group, version, plural], ns, name)
        if request.method != "PATCH" or request.content_type != APPLY or name is None:
            return None
        manager = request.query.get("fieldManager", "")
        if not manager:
            return status(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                          "is required for apply patch")
        text = await request.text()
        try:  # YAML, which kubectl sends as JSON
            config = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            return status(400, "BadRequest", f"error decoding YAML: {exc}")
        if not isinstance(config, dict):
            return status(400, "BadRequest", "the body of an apply patch must be an object")
        wanted = "/".join(filter(None, (group, version)))
        meta = config.get("metadata") or {}
        if config.get("apiVersion") != wanted or not config.get("kind"):
            return status(400, "BadRequest", f"the API version in the data ({config.get('apiVersion')}) does not "
                          f"match the expected API version ({wanted})")
        if meta.get("name") != name:
            return status(400, "BadRequest", f"the name of the object ({meta.get('name')}) does not match the "
                          f"name on the URL ({name})")
        if ns and meta.get("namespace", ns) != ns:
            return status(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                          "sent on the request")
        return self._apply(group, version, plural, ns, name, config, manager,
                           request.query.get("force", "").lower() == "true", request)

    # -- apply ------------------------------------------------------------------------
    def _apply(self, group: str, version: str, plural: str, ns: str, name: str, config: dict[str, Any],
               manager: str, force: bool, request: web.Request) -> web.StreamResponse:
        crd = self.server.custom.crds.get((group, plural))
        if (group, version, plural) in BUILTIN:
            kind, namespaced = BUILTIN[group, version, plural]
            resource = resource_name(group, plural)
        elif (group, plural) in (("", "pods"), ("", "nodes")):
            kind, namespaced, resource = ("Pod", True, "pods") if plural == "pods" else ("Node", False, "nodes")
        elif crd is not None and crd.version == version:
            kind, namespaced, resource = crd.kind, crd.namespaced, crd.resource
        elif (group, version, plural) in (CRDS, WEBHOOKS):
            kind, namespaced, resource = OTHER_KINDS[plural], False, plural
        else:
            return status(404, "NotFound", NOT_SERVED)
        if namespaced != bool(ns):
            return status(404, "NotFound", NOT_SERVED)
        if config["kind"] != kind:
            return status(400, "BadRequest", f"the kind in the data ({config['kind']}) does not match the expected "
                          f"kind ({kind})")
        if ns and ns not in INITIAL_NAMESPACES and ("", ns) not in self.store.objects["namespaces"]:
            return not_found("namespaces", ns)
        if crd is None or crd.status_subresource:  # the main resource ignores status (kept as it is)
            config = {k: v for k, v in config.items() if k != "status"}
        live = self._live(resource, ns, name)
        try:
            new = apply(live, config, manager, force=force, now=now_stamp())
        except ApplyConflict as exc:
            body = status_body(409, "Conflict", str(exc), name=name, kind=plural,
                               causes=[{"reason": "FieldManagerConflict", "field": "." + ".".join(path),
                                        "message": f'conflict with "{who}"'} for path, who in exc.conflicts])
            return web.json_response(body, status=409)
        if new == live:
            return web.json_response(live)
        meta = new["metadata"]
        meta.update(name=name, **({"namespace": ns} if ns else {}))
        if live is None:
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_stamp(), generation=1)
            if plural == "pods":
                new.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
                new.setdefault("status", {}).setdefault("phase", "Pending")
        elif new.get("spec") != live.get("spec"):
            meta["generation"] = int(live["metadata"].get("generation", 1)) + 1
        if crd is not None:
            checked = admit_custom_resource(crd, new, request)
            if isinstance(checked, web.Response):
                return checked
            new = checked[0]
            if live is not None and "status" in live and crd.status_subresource:
                new["status"] = copy.deepcopy(live["status"])
        return self._store(resource, plural, live, new)

    def _live(self, resource: str, ns: str, name: str) -> dict[str, Any] | None:
        if resource == "customresourcedefinitions":
            crd = self.server.custom.crd_named(name)
            return copy.deepcopy(crd.document) if crd else None
        return copy.deepcopy(self.store.objects[resource].get((ns, name)))

    def _store(self, resource: str, plural: str, live: dict[str, Any] | None,
               new: dict[str, Any]) -> web.StreamResponse:
        code = 201 if live is None else 200
        if resource == "customresourcedefinitions":
            try:
                crd = self.server.custom.register(new)
            except ValueError as exc:
                return status(422, "Invalid", f'CustomResourceDefinition.apiextensions.k8s.io '
                              f'"{new["metadata"]["name"]}" is invalid: {exc}')
            if live is not None:
                crd.document["metadata"].update(uid=live["metadata"]["uid"],
                                                creationTimestamp=live["metadata"]["creationTimestamp"])
            return web.json_response(crd.document, status=code)
        if resource == "mutatingwebhookconfigurations":
            try:
                return web.json_response(self.server.add_webhook_configuration(new), status=code)
            except ValueError as exc:
                return status(422, "Invalid", f'MutatingWebhookConfiguration.admissionregistration.k8s.io '
                              f'"{new["metadata"]["name"]}" is invalid: {exc}')
        return web.json_response(self.store.write(resource, "ADDED" if live is None else "MODIFIED", new),
                                 status=code)

    # -- read -------------------------------------------------------------------------
    def _document(self, path: str) -> dict[str, Any] | None:
        """The discovery and OpenAPI documents of the built-in groups (`builtin_docs.py`)."""
        if path == "/openapi/v3":  # the custom resources' group versions, and the applied kinds'
            root = openapi_docs.root(list(self.server.custom.crds.values()))
            return {"paths": {**root["paths"], **builtin_docs.openapi_paths(APPLIED)}}
        parts = path.split("/")
        if path.startswith("/openapi/v3/api/") and len(parts) == 5:
            return builtin_docs.openapi("", parts[4], APPLIED)
        if path.startswith("/openapi/v3/apis/") and len(parts) == 6:
            return builtin_docs.openapi(parts[4], parts[5], APPLIED)
        if len(parts) == 4 and parts[1] == "apis":
            return builtin_docs.group_resources(parts[2], parts[3], BUILTIN)
        return None

    def _get(self, resource: str, kind_scope: tuple[str, bool], ns: str, name: str | None) -> web.StreamResponse:
        kind, namespaced = kind_scope
        if namespaced != bool(ns) and (name is not None or ns):
            return status(404, "NotFound", NOT_SERVED)
        if name is not None:
            obj = self.store.objects[resource].get((ns, name))
            return web.json_response(obj) if obj is not None else not_found(resource, name)
        items = [o for (at, _), o in self.store.objects[resource].items() if not ns or at == ns]
        api_version = self.store.kinds[resource][1]
        return web.json_response({"kind": f"{kind}List", "apiVersion": api_version,
                                  "metadata": {"resourceVersion": str(self.store.rv)}, "items": items})
