"""A small Kubernetes API server for tests: the real REST and watch
protocol, for exactly the resources the bridge uses.

    GET    /api/v1/pods, /api/v1/namespaces/{ns}/pods     list, or watch=true
    GET    /api/v1/namespaces/{ns}/pods/{name}
    PATCH  /api/v1/namespaces/{ns}/pods/{name}            merge / strategic merge patch
    POST   /api/v1/namespaces/{ns}/pods/{name}/binding    409 when already bound
    POST   /api/v1/namespaces/{ns}/pods/{name}/eviction   429 while a "PDB" blocks it
    GET    /api/v1/nodes, /api/v1/nodes/{name}            list / watch / get
    PATCH  /api/v1/nodes/{name}
    POST   /api/v1/namespaces/{ns}/events                 409 when the name exists

As the API server does: one global resourceVersion counter stamped on every
write; list responses carry `metadata.resourceVersion`; a watch from a
resourceVersion replays every later change, then streams chunked JSON lines
`{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`; a watch
from a compacted resourceVersion gets an ERROR event whose Status has code
410; a patch carrying `metadata.resourceVersion` is refused with 409 when the
object changed; errors are `Status` objects. A strategic merge patch is
applied as a JSON merge patch, which is the same for every field the bridge
patches (annotations, and `spec.taints`, a list without a merge key).

Test hooks: `add_pod`/`update_pod`/`delete_pod`, `add_node`/`update_node`,
`compact()`, `break_watches(mode)` (abort the connection, end the stream,
or tear a line in half first), `send_bookmarks()`, `block_eviction()`,
`conflict_binding()`, `fail()` (answer the next matching requests with an
error status), and `requests` (everything asked, for assertions).
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
FIELDS = {"pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName", "status.phase"},
          "nodes": {"metadata.name", "spec.unschedulable"}}
KINDS = {"pods": "Pod", "nodes": "Node"}


def now_stamp() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def status(code: int, reason: str, message: str, **details: Any) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 300 else "Success",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return web.json_response(body, status=code)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return "false" if path == "spec.unschedulable" else ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_selector(resource: str, text: str | None) -> list[tuple[str, bool, str]]:
    """`a=b,c!=d` → [(field, equal, value)]; ValueError on unsupported fields."""
    terms = []
    for term in filter(None, (text or "").split(",")):
        for op, equal in (("!=", False), ("==", True), ("=", True)):
            if op in term:
                name, value = term.split(op, 1)
                if name not in FIELDS[resource]:
                    raise ValueError(f'field label not supported: {name}')
                terms.append((name, equal, value))
                break
    return terms


@dataclass
class Watcher:
    resource: str
    namespace: str | None
    selector: list[tuple[str, bool, str]]
    bookmarks: bool
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    def wants(self, resource: str, obj: dict[str, Any]) -> bool:
        if resource != self.resource:
            return False
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        return all((_field(obj, name) == value) == equal for name, equal, value in self.selector)


class FakeKubeApi:
    """The fake API server; `await start()`, then point a Configuration at `url`."""

    def __init__(self, *, bookmark_interval_s: float | None = None) -> None:
        self.rv = 0
        self.oldest_rv = 0
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"pods": {}, "nodes": {}}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.watchers: list[Watcher] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.authorizations: list[str | None] = []
        self.evictions: list[tuple[str, str]] = []
        self.bindings: list[tuple[str, str, str]] = []
        self._blocked: dict[tuple[str, str], int] = {}
        self._conflicts: dict[tuple[str, str], int] = {}
        self._failures: list[list[Any]] = []
        self.bookmark_interval_s = bookmark_interval_s
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- lifecycle --------------------------------------------------------------
    async def start(self) -> "FakeKubeApi":
        app = web.Application(middlewares=[self._record])
        r = app.router
        r.add_get("/api/v1/pods", self._list_or_watch("pods"))
        r.add_get("/api/v1/namespaces/{ns}/pods", self._list_or_watch("pods"))
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._get("pods"))
        r.add_patch("/api/v1/namespaces/{ns}/pods/{name}", self._patch("pods"))
        r.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", self._binding)
        r.add_post("/api/v1/namespaces/{ns}/pods/{name}/eviction", self._eviction)
        r.add_get("/api/v1/nodes", self._list_or_watch("nodes"))
        r.add_get("/api/v1/nodes/{name}", self._get("nodes"))
        r.add_patch("/api/v1/nodes/{name}", self._patch("nodes"))
        r.add_post("/api/v1/namespaces/{ns}/events", self._create_event)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        for watcher in list(self.watchers):
            watcher.queue.put_nowait(("END", "eof"))
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> "FakeKubeApi":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- test hooks ---------------------------------------------------------------
    def add_pod(self, name: str, namespace: str = "default", *, scheduler: str = "tidal", cpu: str | None = "1",
                memory: str | None = "1Gi", limits: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                node: str | None = None, phase: str = "Pending", priority: int | None = None,
                qos_class: str | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
        requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
        resources: dict[str, Any] = {"requests": requests}
        if limits is not None:
            resources["limits"] = limits
        pod_spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [
            {"name": "app", "image": "busybox", "resources": resources}]}
        if priority is not None:
            pod_spec["priority"] = priority
        if node:
            pod_spec["nodeName"] = node
        pod_spec.update(spec or {})
        qos = qos_class or ("BestEffort" if not requests and not limits else
                            "Guaranteed" if limits and all(limits.get(k) == v for k, v in requests.items())
                            and set(limits) >= {"cpu", "memory"} else "Burstable")
        obj = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                            "creationTimestamp": now_stamp(), "labels": dict(labels or {}),
                            "annotations": dict(annotations or {}),
                            "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
               "spec": pod_spec, "status": {"phase": phase, "qosClass": qos}}
        return self._write("pods", "ADDED", obj)

    def update_pod(self, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects["pods"][(namespace, name)])
        change(obj)
        return self._write("pods", "MODIFIED", obj)

    def delete_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._write("pods", "DELETED", copy.deepcopy(self.objects["pods"][(namespace, name)]))

    def add_node(self, name: str, *, cpu: str = "8", memory: str = "32Gi", gpus: int = 0,
                 labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
                 allocatable: dict[str, str] | None = None) -> dict[str, Any]:
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        obj = {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now_stamp(),
                            "labels": {"kubernetes.io/hostname": name, **(labels or {})}, "annotations": {}},
               "spec": {"taints": list(taints or [])} if taints else {},
               "status": {"capacity": capacity, "allocatable": {**capacity, **(allocatable or {})},
                          "conditions": [{"type": "Ready", "status": "True"}]}}
        return self._write("nodes", "ADDED", obj)

    def update_node(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects["nodes"][("", name)])
        change(obj)
        return self._write("nodes", "MODIFIED", obj)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects["pods"].get((namespace, name))

    def node(self, name: str) -> dict[str, Any] | None:
        return self.objects["nodes"].get(("", name))

    def compact(self) -> None:
        """Forget history: a watch from any older resourceVersion gets 410."""
        self.history.clear()
        self.oldest_rv = self.rv

    def break_watches(self, mode: str = "abort") -> int:
        """Break every open watch after what it was sent so far: `abort` the
        connection, end the stream (`eof`), or send half a line then abort
        (`partial`). Returns how many were broken."""
        for watcher in self.watchers:
            watcher.queue.put_nowait(("END", mode))
        return len(self.watchers)

    def send_bookmarks(self) -> None:
        for watcher in self.watchers:
            if watcher.bookmarks:
                watcher.queue.put_nowait(self._bookmark(watcher.resource))

    def block_eviction(self, namespace: str, name: str, times: int) -> None:
        """Answer the next `times` evictions of this pod with 429 (a PDB)."""
        self._blocked[(namespace, name)] = times

    def conflict_binding(self, namespace: str, name: str, times: int) -> None:
        """Answer the next `times` bindings of this pod with 409 Conflict."""
        self._conflicts[(namespace, name)] = times

    def fail(self, method: str, path_part: str, code: int, times: int = 1, **query: str) -> None:
        """Answer the next `times` requests whose path contains `path_part`
        (and whose query has the given values) with `code`."""
        self._failures.append([method.upper(), path_part, code, times, query])

    def count(self, method: str, path_part: str, **query: str) -> int:
        return sum(1 for m, p, q in self.requests if m == method and path_part in p
                   and all(q.get(k) == v for k, v in query.items()))

    # -- storage ------------------------------------------------------------------
    def _key(self, resource: str, obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj["metadata"]
        return (meta.get("namespace", "") if resource == "pods" else "", meta["name"])

    def _write(self, resource: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = self._key(resource, obj)
        if kind == "DELETED":
            self.objects[resource].pop(key, None)
        else:
            self.objects[resource][key] = obj
        snapshot = copy.deepcopy(obj)
        self.history.append((self.rv, resource, kind, snapshot))
        for watcher in self.watchers:
            if watcher.wants(resource, snapshot):
                watcher.queue.put_nowait((kind, snapshot))
        return copy.deepcopy(obj)

    def _bookmark(self, resource: str) -> tuple[str, dict[str, Any]]:
        return ("BOOKMARK", {"kind": KINDS[resource], "apiVersion": "v1",
                             "metadata": {"resourceVersion": str(self.rv)}})

    # -- HTTP -----------------------------------------------------------------------
    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.requests.append((request.method, request.path, dict(request.query)))
        self.authorizations.append(request.headers.get("Authorization"))
        for failure in self._failures:
            method, part, code, times, query = failure
            if times > 0 and request.method == method and part in request.path \
                    and all(request.query.get(k) == v for k, v in query.items()):
                failure[3] -= 1
                return status(code, "InternalError" if code >= 500 else "Failure", f"injected {code}")
        return await handler(request)

    def _get(self, resource: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            key = (request.match_info.get("ns", ""), request.match_info["name"])
            obj = self.objects[resource].get(key)
            if obj is None:
                return status(404, "NotFound", f'{resource} "{key[1]}" not found', name=key[1], kind=resource)
            return web.json_response(obj)
        return handle

    def _patch(self, resource: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            key = (request.match_info.get("ns", ""), request.match_info["name"])
            if request.content_type not in MERGE_TYPES:
                return status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                              f"{request.content_type}")
            obj = self.objects[resource].get(key)
            if obj is None:
                return status(404, "NotFound", f'{resource} "{key[1]}" not found', name=key[1], kind=resource)
            patch = await request.json()
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != obj["metadata"]["resourceVersion"]:
                return status(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{key[1]}": the object '
                              "has been modified; please apply your changes to the latest version and try again")
            patched = merge_patch(obj, patch)
            patched["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            if patched == obj:  # a no-op write does not bump the resourceVersion
                return web.json_response(obj)
            return web.json_response(self._write(resource, "MODIFIED", patched))
        return handle

    async def _binding(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        body = await request.json()
        pod = self.objects["pods"].get((ns, name))
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
        uid = (body.get("metadata") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            return status(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                          f"UID in object meta: {pod['metadata']['uid']}")
        if self._conflicts.get((ns, name), 0) > 0:
            self._conflicts[(ns, name)] -= 1
            return status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": the object has '
                          "been modified; please apply your changes to the latest version and try again")
        if pod["spec"].get("nodeName"):
            return status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                          f'already assigned to node "{pod["spec"]["nodeName"]}"')
        node = (body.get("target") or {}).get("name")
        if not node:
            return status(400, "BadRequest", "binding target has no name")

        def bind(obj: dict[str, Any]) -> None:
            obj["spec"]["nodeName"] = node
            obj["status"].setdefault("conditions", []).append({"type": "PodScheduled", "status": "True"})
        self.update_pod(ns, name, bind)
        self.bindings.append((ns, name, node))
        return status(201, "", "")

    async def _eviction(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        body = await request.json()
        pod = self.objects["pods"].get((ns, name))
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
        uid = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            return status(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                          f"UID in object meta: {pod['metadata']['uid']}")
        if self._blocked.get((ns, name), 0) > 0:
            self._blocked[(ns, name)] -= 1
            return status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                          causes=[{"reason": "DisruptionBudget",
                                   "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}])
        self.delete_pod(ns, name)
        self.evictions.append((ns, name))
        return status(201, "", "")

    async def _create_event(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        body = await request.json()
        name = (body.get("metadata") or {}).get("name") or f"event.{uuid.uuid4().hex[:16]}"
        if (ns, name) in self.events:
            return status(409, "AlreadyExists", f'events "{name}" already exists', name=name, kind="events")
        self.rv += 1
        body["metadata"] = {**body.get("metadata", {}), "name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                            "resourceVersion": str(self.rv), "creationTimestamp": now_stamp()}
        self.events[(ns, name)] = body
        return web.json_response(body, status=201)

    def _list_or_watch(self, resource: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                selector = parse_selector(resource, request.query.get("fieldSelector"))
            except ValueError as exc:
                return status(400, "BadRequest", str(exc))
            watcher = Watcher(resource, request.match_info.get("ns"), selector,
                              request.query.get("allowWatchBookmarks", "").lower() == "true")
            if request.query.get("watch", "").lower() in ("true", "1"):
                return await self._watch(request, watcher)
            items = [copy.deepcopy(o) for o in self.objects[resource].values() if watcher.wants(resource, o)]
            for item in items:  # list items carry no apiVersion/kind
                item.pop("apiVersion", None)
                item.pop("kind", None)
            return web.json_response({"kind": f"{KINDS[resource]}List", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": str(self.rv)}, "items": items})
        return handle

    async def _watch(self, request: web.Request, watcher: Watcher) -> web.StreamResponse:
        since = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds", "1800"))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        if since not in ("", "0") and int(since) < self.oldest_rv:
            await self._send(response, "ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                 "status": "Failure", "reason": "Expired", "code": 410,
                                                 "message": f"too old resource version: {since} ({self.oldest_rv})"})
            await response.write_eof()
            return response
        # Backlog and registration happen without an await in between, so
        # no change falls between the two.
        if since in ("", "0"):
            backlog = [("ADDED", copy.deepcopy(o)) for o in self.objects[watcher.resource].values()
                       if watcher.wants(watcher.resource, o)]
        else:
            backlog = [(kind, copy.deepcopy(o)) for rv, res, kind, o in self.history
                       if rv > int(since) and watcher.wants(res, o)]
        for item in backlog:
            watcher.queue.put_nowait(item)
        self.watchers.append(watcher)
        ticker = asyncio.create_task(self._tick(watcher)) if watcher.bookmarks and self.bookmark_interval_s else None
        try:
            return await self._stream(request, response, watcher, timeout)
        finally:
            self.watchers.remove(watcher)
            if ticker is not None:
                ticker.cancel()

    async def _stream(self, request: web.Request, response: web.StreamResponse, watcher: Watcher,
                      timeout: float) -> web.StreamResponse:
        try:
            return await self._pump(request, response, watcher, timeout)
        except ConnectionResetError:  # the client went away first
            return response

    async def _pump(self, request: web.Request, response: web.StreamResponse, watcher: Watcher,
                    timeout: float) -> web.StreamResponse:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                kind, obj = await asyncio.wait_for(watcher.queue.get(), timeout=max(left, 0.001))
            except asyncio.TimeoutError:
                await response.write_eof()  # timeoutSeconds reached: a clean end
                return response
            if kind != "END":
                await self._send(response, kind, obj)
                continue
            if obj == "eof":
                await response.write_eof()
            else:
                if obj == "partial":
                    await response.write(b'{"type": "MODIFIED", "object": {"metadata": {"na')
                if request.transport is not None:
                    request.transport.abort()
            return response

    async def _send(self, response: web.StreamResponse, kind: str, obj: dict[str, Any]) -> None:
        await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    async def _tick(self, watcher: Watcher) -> None:
        while True:
            await asyncio.sleep(self.bookmark_interval_s or 1.0)
            watcher.queue.put_nowait(self._bookmark(watcher.resource))
