"""Custom resources, generically, as the API server serves them once their
CustomResourceDefinition is registered:

    POST, GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions[/{name}]  (and DELETE one)
    GET       /apis/{group}/{version}                                    discovery
    GET, POST /apis/{group}/{version}[/namespaces/{ns}]/{plural}           list / watch, create
    GET, PUT, PATCH, DELETE  …/{plural}/{name}
    GET, PUT, PATCH          …/{plural}/{name}/status                    with a status subresource

As apiextensions-apiserver does: a CRD whose schema is not structural is
refused (422); an object is pruned of the fields its schema does not name
(400 with `fieldValidation=Strict`, which kubectl sends; else a Warning
header) and checked against the schema (422 Invalid with the field
errors, `openapi.py`); with a status subresource the main resource ignores
`status` and `/status` writes nothing else; `metadata.generation` counts
spec changes. Objects live in the shared store under `{plural}.{group}`,
so watches, resourceVersions and compaction work as for pods.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from aiohttp import web

from . import openapi_docs, tables
from .definitions import Crd
from .openapi import Cause, prune, validate
from .protocol import MERGE_TYPES, Watcher, merge_patch, not_found, now_stamp, parse_selector, status, status_body
from .store import Store
from .watch import serve_watch

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
OWN = ("apiVersion", "kind", "metadata")


class CustomResources:
    """The routes above over `store`; `register` for tests."""

    def __init__(self, store: Store, bookmark_interval_s: float | None = None) -> None:
        self.store = store
        self.bookmark_interval_s = bookmark_interval_s
        self.crds: dict[tuple[str, str], Crd] = {}  # (group, plural) -> definition

    def add_routes(self, r: web.UrlDispatcher) -> None:
        r.add_get(CRDS, self._list_crds)
        r.add_post(CRDS, self._create_crd)
        r.add_get(CRDS + "/{name}", self._get_crd)
        r.add_delete(CRDS + "/{name}", self._delete_crd)
        r.add_get("/apis/{group}/{version}", self._discovery)
        r.add_get("/openapi/v3", self._openapi)
        r.add_get("/openapi/v3/apis/{group}/{version}", self._openapi)
        for base in ("/apis/{group}/{version}/namespaces/{ns}/{plural}", "/apis/{group}/{version}/{plural}"):
            r.add_get(base, self._list)
            r.add_post(base, self._create)
            r.add_get(base + "/{name}", self._get)
            r.add_put(base + "/{name}", self._write(status_only=False, replace=True))
            r.add_patch(base + "/{name}", self._write(status_only=False, replace=False))
            r.add_delete(base + "/{name}", self._delete)
            r.add_get(base + "/{name}/status", self._get)
            r.add_put(base + "/{name}/status", self._write(status_only=True, replace=True))
            r.add_patch(base + "/{name}/status", self._write(status_only=True, replace=False))

    # -- definitions --------------------------------------------------------------
    def register(self, doc: dict[str, Any]) -> Crd:
        """Register a CRD (ValueError when it would be refused)."""
        crd = Crd.parse(doc)
        doc = copy.deepcopy(doc)
        doc.setdefault("metadata", {}).update(uid=str(uuid.uuid4()), creationTimestamp=now_stamp())
        doc["status"] = {"conditions": [{"type": "Established", "status": "True"}],
                         "acceptedNames": doc["spec"]["names"]}
        crd.document = doc
        self.crds[(crd.group, crd.plural)] = crd
        self.store.objects.setdefault(crd.resource, {})
        self.store.kinds[crd.resource] = (crd.kind, crd.api_version)
        return crd

    def groups(self) -> dict[str, str]:
        """group -> its served version, for /apis."""
        return {crd.group: crd.version for crd in self.crds.values()}

    async def _create_crd(self, request: web.Request) -> web.StreamResponse:
        doc = await request.json()
        name = (doc.get("metadata") or {}).get("name", "")
        if any(c.document["metadata"]["name"] == name for c in self.crds.values()):
            return status(409, "AlreadyExists", f'customresourcedefinitions.apiextensions.k8s.io "{name}" already '
                          "exists", name=name, kind="customresourcedefinitions")
        try:
            crd = self.register(doc)
        except ValueError as exc:
            return status(422, "Invalid", f'CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: '
                          f"{exc}", name=name, kind="CustomResourceDefinition")
        return web.json_response(crd.document, status=201)

    async def _list_crds(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"kind": "CustomResourceDefinitionList", "apiVersion": "apiextensions.k8s.io/v1",
                                  "metadata": {"resourceVersion": str(self.store.rv)},
                                  "items": [c.document for c in self.crds.values()]})

    def crd_named(self, name: str) -> Crd | None:
        return next((c for c in self.crds.values() if c.document["metadata"]["name"] == name), None)

    async def _get_crd(self, request: web.Request) -> web.StreamResponse:
        crd = self.crd_named(request.match_info["name"])
        return web.json_response(crd.document) if crd else not_found("customresourcedefinitions",
                                                                        request.match_info["name"])

    async def _delete_crd(self, request: web.Request) -> web.StreamResponse:
        crd = self.crd_named(request.match_info["name"])
        if crd is None:
            return not_found("customresourcedefinitions", request.match_info["name"])
        for obj in list(self.store.objects.get(crd.resource, {}).values()):  # its objects go with it
            self.store.write(crd.resource, "DELETED", copy.deepcopy(obj))
        del self.crds[(crd.group, crd.plural)]
        return web.json_response(crd.document)

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        if "group" not in request.match_info:
            return web.json_response(openapi_docs.root(list(self.crds.values())))
        group, version = request.match_info["group"], request.match_info["version"]
        mine = [c for c in self.crds.values() if (c.group, c.version) == (group, version)]
        return web.json_response(openapi_docs.group_version(mine)) if mine else not_found("openapi", group)

    async def _discovery(self, request: web.Request) -> web.StreamResponse:
        group, version = request.match_info["group"], request.match_info["version"]
        if (group, version) == ("apiextensions.k8s.io", "v1"):
            return web.json_response(tables.apiextensions_resources())
        mine = [c for c in self.crds.values() if (c.group, c.version) == (group, version)]
        if not mine:
            return status(404, "NotFound", "the server could not find the requested resource")
        return web.json_response(tables.group_resources(f"{group}/{version}", mine))

    # -- objects ------------------------------------------------------------------
    def _crd(self, request: web.Request) -> Crd | web.Response:
        info = request.match_info
        crd = self.crds.get((info["group"], info["plural"]))
        scoped = "ns" in info
        if crd is None or crd.version != info["version"] or (scoped and not crd.namespaced) or (
                crd.namespaced and not scoped and ("name" in info or request.method != "GET")):
            return status(404, "NotFound", "the server could not find the requested resource")
        return crd

    @staticmethod
    def _key(request: web.Request) -> tuple[str, str]:
        return request.match_info.get("ns", ""), request.match_info["name"]

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """An object as stored (tests read status this way)."""
        return self.store.objects.get(resource, {}).get((namespace, name))

    async def _list(self, request: web.Request) -> web.StreamResponse:
        crd = self._crd(request)
        if isinstance(crd, web.Response):
            return crd
        try:
            selector = parse_selector(crd.resource, request.query.get("fieldSelector"))
        except ValueError as exc:
            return status(400, "BadRequest", str(exc))
        watcher = Watcher(crd.resource, request.match_info.get("ns"), selector,
                          request.query.get("allowWatchBookmarks", "").lower() == "true")
        if request.query.get("watch", "").lower() in ("true", "1"):
            return await serve_watch(request, self.store, watcher, self.bookmark_interval_s)
        items = [o for o in self.store.objects[crd.resource].values() if watcher.wants(crd.resource, o)]
        if tables.wants_table(request.headers.get("Accept", "")):
            return web.json_response(tables.custom_table(crd.columns, items, str(self.store.rv),
                                                         request.query.get("includeObject", "Metadata")))
        return web.json_response({"kind": f"{crd.kind}List", "apiVersion": crd.api_version,
                                  "metadata": {"resourceVersion": str(self.store.rv)}, "items": items})

    async def _get(self, request: web.Request) -> web.StreamResponse:
        crd = self._crd(request)
        if isinstance(crd, web.Response):
            return crd
        obj = self.store.objects[crd.resource].get(self._key(request))
        if obj is None:
            return not_found(crd.resource, request.match_info["name"])
        if tables.wants_table(request.headers.get("Accept", "")):
            return web.json_response(tables.custom_table(crd.columns, [obj], str(self.store.rv)))
        return web.json_response(obj)

    async def _create(self, request: web.Request) -> web.StreamResponse:
        crd = self._crd(request)
        if isinstance(crd, web.Response):
            return crd
        body = await request.json()
        meta = body.setdefault("metadata", {})
        name = meta.get("name") or (meta.get("generateName", "") + uuid.uuid4().hex[:5])
        ns = request.match_info.get("ns", "")
        if (ns, name) in self.store.objects[crd.resource]:
            return status(409, "AlreadyExists", f'{crd.resource} "{name}" already exists', name=name,
                          group=crd.group, kind=crd.plural)
        if crd.status_subresource:
            body.pop("status", None)
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=now_stamp(), generation=1)
        if crd.namespaced:
            meta["namespace"] = ns
        checked = _admit(crd, body, request)
        if isinstance(checked, web.Response):
            return checked
        return web.json_response(self.store.write(crd.resource, "ADDED", checked[0]), status=201,
                                 headers=checked[1])

    def _write(self, *, status_only: bool, replace: bool):
        async def handle(request: web.Request) -> web.StreamResponse:
            crd = self._crd(request)
            if isinstance(crd, web.Response):
                return crd
            if not replace and request.content_type not in MERGE_TYPES:
                return status(415, "UnsupportedMediaType", "the body of the request was in an unknown format: "
                              f"{request.content_type}")
            key = self._key(request)
            old = self.store.objects[crd.resource].get(key)
            if old is None:
                return not_found(crd.resource, key[1])
            body = await request.json()
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != old["metadata"]["resourceVersion"]:
                return status(409, "Conflict", f'Operation cannot be fulfilled on {crd.resource} "{key[1]}": the '
                              "object has been modified; please apply your changes to the latest version and try again")
            new = _changed(crd, old, body, status_only=status_only, replace=replace)
            checked = _admit(crd, new, request)
            if isinstance(checked, web.Response):
                return checked
            new, headers = checked
            if new == old:  # a no-op write does not bump the resourceVersion
                return web.json_response(old, headers=headers)
            if new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
            return web.json_response(self.store.write(crd.resource, "MODIFIED", new), headers=headers)
        return handle

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        crd = self._crd(request)
        if isinstance(crd, web.Response):
            return crd
        obj = self.store.objects[crd.resource].get(self._key(request))
        if obj is None:
            return not_found(crd.resource, request.match_info["name"])
        return web.json_response(self.store.write(crd.resource, "DELETED", copy.deepcopy(obj)))


def _changed(crd: Crd, old: dict[str, Any], body: dict[str, Any], *, status_only: bool,
             replace: bool) -> dict[str, Any]:
    """The object a write asks for: with a status subresource, the main
    resource keeps the stored status and `/status` keeps everything else."""
    new = copy.deepcopy(body) if replace else merge_patch(old, body)
    new["metadata"] = {**old["metadata"], **{k: v for k, v in (new.get("metadata") or {}).items()
                                             if k in ("labels", "annotations", "finalizers")}}
    new["apiVersion"], new["kind"] = crd.api_version, crd.kind
    if status_only:
        return {**copy.deepcopy(old), "status": new.get("status")} if new.get("status") is not None else \
            {k: copy.deepcopy(v) for k, v in old.items() if k != "status"}
    if crd.status_subresource:
        new.pop("status", None)
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
    return new


def _admit(crd: Crd, obj: dict[str, Any], request: web.Request
           ) -> tuple[dict[str, Any], dict[str, str]] | web.Response:
    """`obj` pruned and checked: (what to store, response headers), or the refusal."""
    name = obj["metadata"].get("name", "")
    if obj.get("apiVersion", crd.api_version) != crd.api_version or obj.get("kind", crd.kind) != crd.kind:
        return status(400, "BadRequest", f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                      f"expected API version ({crd.api_version})")
    unknown: list[str] = []
    body = {k: v for k, v in obj.items() if k not in OWN}
    kept = prune(body, crd.schema, "", unknown)
    unknown = [u.lstrip(".") for u in unknown]
    if unknown and request.query.get("fieldValidation") == "Strict":
        shown = ", ".join(f'unknown field "{u}"' for u in unknown)
        return status(400, "BadRequest", f'{crd.kind} in version "{crd.version}" cannot be handled as a '
                      f"{crd.kind}: strict decoding error: {shown}")
    properties = crd.schema.get("properties") or {}
    causes = [c for key, value in kept.items() if key in properties for c in validate(value, properties[key], key)]
    causes += [Cause("FieldValueRequired", key, "Required value") for key in crd.schema.get("required", [])
               if key not in kept and key not in OWN]
    if causes:
        texts = [c.text() for c in causes]
        shown = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
        body = status_body(422, "Invalid", f'{crd.kind}.{crd.group} "{name}" is invalid: {shown}', name=name,
                           group=crd.group, kind=crd.kind,
                           causes=[{"reason": c.reason, "message": c.message, "field": c.field} for c in causes])
        return web.json_response(body, status=422)
    headers = {"Warning": ", ".join(f'299 - "unknown field \\"{u}\\""' for u in unknown)} if unknown else {}
    return {**{k: obj[k] for k in OWN if k in obj}, "apiVersion": crd.api_version, "kind": crd.kind, **kept}, headers
