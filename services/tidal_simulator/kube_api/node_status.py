"""Writes of a node's status subresource, through mutating admission, as
kube-apiserver does them:

    GET           /api/v1/nodes/{name}/status
    PATCH         /api/v1/nodes/{name}/status    merge, strategic merge or JSON patch
    PUT           /api/v1/nodes/{name}/status    the whole Node
    in process    await api.write_node_status(name, status, user=...)

The request's object (the stored node with the write applied) goes through
the admission chain as an UPDATE of `nodes/status` (`admission.py`), then
the node status strategy: `spec` is the stored one (a change to it is
dropped), and so are the system fields of metadata; labels and annotations
are kept, a webhook's too (nodes do not reset metadata on status writes).
Should the node change while the webhooks are called, the write starts
again from the new node (GuaranteedUpdate), at most `RETRIES` times. The
user is the `Impersonate-User` header (`kubectl --as`), else anonymous.
A mixin of `KubeApiServer`, whose store it writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .admission import AdmissionChain, ApiError, Attributes
from .json_patch import JsonPatchError, apply_json_patch
from .protocol import MERGE_TYPES, not_found, status
from .store import Store
from .strategic import apply_patch, strategic_merge_patch
from .webhook_configs import WebhookConfigurations

JSON_PATCH = "application/json-patch+json"
SYSTEM_METADATA = ("name", "uid", "creationTimestamp", "resourceVersion", "deletionTimestamp", "generation")
RETRIES = 5
Change = Callable[[dict[str, Any]], dict[str, Any]]


def status_strategy(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`nodeStatusStrategy.PrepareForUpdate`: the stored spec and system metadata, the rest as written."""
    result = {**copy.deepcopy(new), "apiVersion": "v1", "kind": "Node"}
    result["metadata"] = {**(new.get("metadata") or {}),
                          **{k: old["metadata"][k] for k in SYSTEM_METADATA if k in old["metadata"]}}
    for key in SYSTEM_METADATA:
        if key not in old["metadata"]:
            result["metadata"].pop(key, None)
    result.pop("spec", None)
    if "spec" in old:
        result["spec"] = copy.deepcopy(old["spec"])
    return result


class NodeStatusWrites:
    store: Store

    def __init__(self, bookmark_interval_s: float | None = None) -> None:
        self.webhooks = WebhookConfigurations(self.store, bookmark_interval_s)
        self.admission = AdmissionChain()

    def add_node_status_routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/api/v1/nodes/{name}/status", self._get_node_status)
        r.add_patch("/api/v1/nodes/{name}/status", self._patch_node_status)
        r.add_put("/api/v1/nodes/{name}/status", self._put_node_status)
        self.webhooks.add_routes(r)

    def add_webhook_configuration(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Register a MutatingWebhookConfiguration (ValueError when invalid), as `kubectl apply` would."""
        old = self.store.objects["mutatingwebhookconfigurations"].get(("", (doc.get("metadata") or {}).get("name")))
        return self.webhooks.create(doc, old=old)

    async def write_node_status(self, name: str, status: dict[str, Any], *, user: str,
                                groups: tuple[str, ...] = ("system:nodes", "system:authenticated")
                                ) -> dict[str, Any]:
        """Merge `status` into node `name`'s status as the kubelet's status
        patch does (a strategic merge: conditions and addresses by type,
        null removes), run mutating admission as `user`, store, tell the
        watchers; the stored node. ApiError (404, 409, or admission's
        refusal with its code) when it is not written."""
        return await self.update_node_status(
            name, lambda node: strategic_merge_patch(node, {"status": status}, "nodes"), user=user, groups=groups)

    async def update_node_status(self, name: str, change: Change, *, user: str, groups: tuple[str, ...] = (),
                                 expected_rv: str | None = None) -> dict[str, Any]:
        """`change` (stored node → the node as written) through admission and the status strategy."""
        for _ in range(RETRIES):
            old = self.store.get("nodes", "", name)
            if old is None:
                raise ApiError(404, "NotFound", f'nodes "{name}" not found')
            if expected_rv and expected_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has '
                               "been modified; please apply your changes to the latest version and try again")
            old = copy.deepcopy(old)
            new = status_strategy(old, change(copy.deepcopy(old)))
            configurations = self.webhooks.all()
            if configurations:
                attributes = Attributes(operation="UPDATE", resource="nodes", sub_resource="status", name=name,
                                        obj=new, old=old, username=user, groups=groups)
                new = status_strategy(old, await self.admission.mutate(configurations, attributes))
            current = self.store.get("nodes", "", name)
            if current is None or current["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]:
                continue  # changed while admission ran: again, from the node as it is now
            if new == old:  # a no-op write does not bump the resourceVersion
                return old
            return self.store.write("nodes", "MODIFIED", new)
        raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object kept changing')

    # -- HTTP -----------------------------------------------------------------------
    @staticmethod
    def _user(request: web.Request) -> tuple[str, tuple[str, ...]]:
        user = request.headers.get("Impersonate-User")
        if not user:
            return "system:anonymous", ("system:unauthenticated",)
        return user, (*request.headers.getall("Impersonate-Group", []), "system:authenticated")

    async def _get_node_status(self, request: web.Request) -> web.StreamResponse:
        node = self.store.get("nodes", "", request.match_info["name"])
        return web.json_response(node) if node else not_found("nodes", request.match_info["name"])

    async def _patch_node_status(self, request: web.Request) -> web.StreamResponse:
        if request.content_type not in (*MERGE_TYPES, JSON_PATCH):
            return status(415, "UnsupportedMediaType", "the body of the request was in an unknown format: "
                          f"{request.content_type}")
        patch = await request.json()
        wanted = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None

        def change(node: dict[str, Any]) -> dict[str, Any]:
            if request.content_type == JSON_PATCH:
                return apply_json_patch(node, patch)
            return apply_patch(request.content_type, "nodes", node, patch)
        return await self._status_write(request, change, wanted)

    async def _put_node_status(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not isinstance(body, dict) or body.get("kind", "Node") != "Node":
            return status(400, "BadRequest", "the body is not a Node")
        return await self._status_write(request, lambda node: copy.deepcopy(body),
                                        (body.get("metadata") or {}).get("resourceVersion"))

    async def _status_write(self, request: web.Request, change: Change, wanted: str | None) -> web.StreamResponse:
        user, groups = self._user(request)
        try:
            return web.json_response(await self.update_node_status(
                request.match_info["name"], change, user=user, groups=groups, expected_rv=wanted))
        except ApiError as exc:
            return status(exc.code, exc.reason, exc.message)
        except JsonPatchError as exc:
            return status(422, "Invalid", f"the JSON patch does not apply: {exc}")
