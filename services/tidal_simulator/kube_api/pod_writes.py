"""The pod writes of the simulated API server: create (409 when the name
exists), delete, `pods/binding` (the node and the Binding's annotations set
in one update; 409 when bound, being deleted or a conflict is injected; 403
when the admission hook refuses) and `pods/eviction` (429 while a "PDB"
blocks it). A mixin of `KubeApiServer`, whose state it uses."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from aiohttp import web

from .protocol import not_found, now_stamp, status
from .strategic import set_condition


class PodWrites:
    async def _create_pod(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        body = await request.json()
        meta = body.setdefault("metadata", {})
        name = meta.get("name") or (meta.get("generateName", "") + uuid.uuid4().hex[:5])
        if (ns, name) in self.objects["pods"]:
            return status(409, "AlreadyExists", f'pods "{name}" already exists', name=name, kind="pods")
        meta.update(name=name, namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now_stamp())
        body.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
        body.setdefault("status", {}).setdefault("phase", "Pending")
        return web.json_response(self.create_pod(body), status=201)

    async def _delete_pod(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if self.pod(ns, name) is None:
            return not_found("pods", name)
        return web.json_response(self.delete_pod(ns, name))

    async def _binding(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        body = await request.json()
        pod = self.objects["pods"].get((ns, name))
        refused = _precondition(pod, name, (body.get("metadata") or {}).get("uid"))
        if refused is not None:
            return refused
        if self.take(self._conflicts, ns, name):
            return status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": the object has '
                          "been modified; please apply your changes to the latest version and try again")
        if pod["metadata"].get("deletionTimestamp"):  # set by a test: this server deletes at once
            return status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                          "being deleted, cannot be assigned to a host")
        if pod["spec"].get("nodeName"):
            return status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                          f'already assigned to node "{pod["spec"]["nodeName"]}"')
        node = (body.get("target") or {}).get("name")
        if not node:
            return status(400, "BadRequest", "binding target has no name")
        annotations = (body.get("metadata") or {}).get("annotations") or {}

        def bind(obj: dict[str, Any]) -> None:  # as the registry's setPodHostAndAnnotations
            obj["spec"]["nodeName"] = node
            obj["metadata"].setdefault("annotations", {}).update(annotations)
            set_condition(obj.setdefault("status", {}), {"type": "PodScheduled", "status": "True"}, now_stamp())
        if self.admit_binding is not None:  # shown the pod as the binding would leave it
            bound = copy.deepcopy(pod)
            bind(bound)
            refusal = self.admit_binding(bound, node)
            if refusal:
                return status(403, "Forbidden", f'admission webhook "kubelet.simulator.tidal.dev" denied the '
                              f"request: {refusal}")
        self.update_pod(ns, name, bind)
        self.bindings.append((ns, name, node))
        return status(201, "", "")

    async def _eviction(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        body = await request.json()
        pod = self.objects["pods"].get((ns, name))
        refused = _precondition(pod, name, ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid"))
        if refused is not None:
            return refused
        if self.take(self._blocked, ns, name):
            return status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                          causes=[{"reason": "DisruptionBudget",
                                   "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}])
        self.evictions.append((ns, name))
        self.delete_pod(ns, name)
        return status(201, "", "")


def _precondition(pod: dict[str, Any] | None, name: str, uid: str | None) -> web.Response | None:
    """404 for a pod that is not there, 409 when the request names another uid."""
    if pod is None:
        return not_found("pods", name)
    if uid and uid != pod["metadata"]["uid"]:
        return status(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                      f"UID in object meta: {pod['metadata']['uid']}")
    return None
