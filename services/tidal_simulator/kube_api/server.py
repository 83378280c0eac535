"""The simulated cluster's Kubernetes API server (aiohttp, localhost): the real REST
and watch protocol for what the bridge, the simulated kubelets and kubectl use.

    GET    /api/v1/pods, /api/v1/namespaces/{ns}/pods     list, or watch=true
    POST   /api/v1/namespaces/{ns}/pods                   409 when the name exists
    GET    /api/v1/namespaces/{ns}/pods/{name}
    PATCH  /api/v1/namespaces/{ns}/pods/{name}            merge / strategic merge patch
    DELETE /api/v1/namespaces/{ns}/pods/{name}
    GET, PATCH /api/v1/namespaces/{ns}/pods/{name}/status the kubelet's status writes
    POST   /api/v1/namespaces/{ns}/pods/{name}/binding    409 when already bound
    POST   /api/v1/namespaces/{ns}/pods/{name}/eviction   429 while a "PDB" blocks it
    GET    /api/v1/nodes, /api/v1/nodes/{name}            list / watch / get
    PATCH  /api/v1/nodes/{name}
    GET, PATCH, PUT /api/v1/nodes/{name}/status          through mutating admission (`node_status.py`)
    /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations   (`webhook_configs.py`)
    POST   /apis/authentication.k8s.io/v1/tokenreviews    tokens it minted (`token_reviews.py`)
    GET, POST /api/v1/namespaces/{ns}/events, GET /api/v1/events   field selectors on involvedObject.*
    GET, PATCH /api/v1/namespaces/{ns}/events/{name}      a repeat counted (`events.py`)
    GET    /api, /apis, /api/v1, /version                 discovery (kubectl)
    /apis/...                                             custom resources (`custom.py`)
    PATCH  any object's URL, apply-patch+yaml              server-side apply (`server_side_apply.py`)

As the API server does: one global resourceVersion (see `store.py`); list
responses carry `metadata.resourceVersion`; a watch from a resourceVersion
replays every later change, then streams chunked JSON lines `{"type":
ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`; a watch from a
compacted resourceVersion gets an ERROR event whose Status has code 410; a
patch carrying `metadata.resourceVersion` is refused with 409 when the
object changed; errors are `Status` objects; `Accept: ...;as=Table` gets
the server-side table kubectl prints (`tables.py`); a list asked with
`limit` comes in pages of one snapshot (`paging.py`).

`admit_binding(pod, node)` plays an admission webhook on bindings, shown the pod as
the binding would leave it: a message refuses the binding with 403. Nothing checks
resources at a binding, as in kube-apiserver: the simulated kubelets admit or reject
the bound pod (`tidal_simulator.kubelet`); the simulator refuses bindings only at its
injected bind-failure rate.

Fault injection for tests: `compact()`, `break_watches(mode)` (abort the connection, end
the stream, or tear a line in half first), `send_bookmarks()`, `block_eviction()`,
`conflict_binding()`, `fail()` (answer the next matching requests with an error
status), and `requests` (everything asked, for assertions).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from aiohttp import web

from . import builtin_docs, tables
from .custom import CustomResources
from .events import EventRoutes
from .objects import node_object, pod_object
from .paging import ContinueError, Pages
from .protocol import KINDS, MERGE_TYPES, Watcher, not_found, parse_selector, status
from .faults import FaultInjection
from .node_status import NodeStatusWrites
from .pod_writes import PodWrites
from .server_side_apply import BUILTIN, ServerSideApply
from .store import Store
from .strategic import apply_patch
from .token_reviews import TokenReviews
from .watch import serve_watch

ADMISSION = {"admissionregistration.k8s.io": "v1"}
BindingAdmission = Callable[[dict[str, Any], str], "str | None"]


class KubeApiServer(FaultInjection, PodWrites, NodeStatusWrites, TokenReviews):
    """`await start()` (or `async with`), then point a client at `url`."""

    def __init__(self, *, bookmark_interval_s: float | None = None, history_limit: int | None = None,
                 record_requests: bool = True) -> None:
        self.store = Store(history_limit)
        self.pages = Pages()  # lists asked in pages (`limit`, `continue`)
        self.custom = CustomResources(self.store, bookmark_interval_s)  # custom resources, see custom.py
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.authorizations: list[str | None] = []
        self.record_requests = record_requests
        self.on_request: Callable[[str, str], None] | None = None
        self.admit_binding: BindingAdmission | None = None
        self.evictions: list[tuple[str, str]] = []
        self.bindings: list[tuple[str, str, str]] = []
        FaultInjection.__init__(self)
        self.server_side_apply = ServerSideApply(self)  # kubectl apply --server-side, and the kinds only it writes
        NodeStatusWrites.__init__(self, bookmark_interval_s)  # nodes/status through admission, its webhooks
        self.bookmark_interval_s = bookmark_interval_s
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- the store, as tests knew it ------------------------------------------------
    @property
    def rv(self) -> int:
        return self.store.rv

    @property
    def objects(self) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
        return self.store.objects

    @property
    def watchers(self) -> list[Watcher]:
        return self.store.watchers

    # -- lifecycle --------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> "KubeApiServer":
        app = web.Application(middlewares=[self._record], client_max_size=16 * 1024 * 1024)
        r = app.router
        r.add_get("/api", self._discovery(lambda: tables.api_versions(self.url.split("//", 1)[-1])))
        r.add_get("/apis", self._discovery(lambda: tables.api_groups({**self.custom.groups(), **ADMISSION,
                                                                       **builtin_docs.groups(BUILTIN)})))
        r.add_get("/api/v1", self._discovery(lambda: builtin_docs.core_resources(tables.core_resources(), BUILTIN)))
        r.add_get("/version", self._discovery(lambda: tables.VERSION))
        r.add_get("/api/v1/pods", self._list_or_watch("pods"))
        r.add_get("/api/v1/namespaces/{ns}/pods", self._list_or_watch("pods"))
        r.add_post("/api/v1/namespaces/{ns}/pods", self._create_pod)
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._get("pods"))
        r.add_patch("/api/v1/namespaces/{ns}/pods/{name}", self._patch("pods"))
        r.add_delete("/api/v1/namespaces/{ns}/pods/{name}", self._delete_pod)
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}/status", self._get("pods"))
        r.add_patch("/api/v1/namespaces/{ns}/pods/{name}/status", self._patch("pods", only="status"))
        r.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", self._binding)
        r.add_post("/api/v1/namespaces/{ns}/pods/{name}/eviction", self._eviction)
        r.add_get("/api/v1/nodes", self._list_or_watch("nodes"))
        r.add_get("/api/v1/nodes/{name}", self._get("nodes"))
        r.add_patch("/api/v1/nodes/{name}", self._patch("nodes"))
        self.add_node_status_routes(r)  # before the custom resources' /apis/{group}/… routes
        self.add_token_review_routes(r)
        events = EventRoutes(self)
        r.add_get("/api/v1/events", events.list)
        r.add_get("/api/v1/namespaces/{ns}/events", events.list)
        r.add_post("/api/v1/namespaces/{ns}/events", events.create)
        r.add_get("/api/v1/namespaces/{ns}/events/{name}", events.get)
        r.add_patch("/api/v1/namespaces/{ns}/events/{name}", events.patch)
        self.custom.add_routes(r)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{host}:{bound}"
        return self

    async def stop(self) -> None:
        await self.admission.close()
        for watcher in list(self.watchers):
            watcher.queue.put_nowait(("END", "eof"))
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> "KubeApiServer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- writing objects (the simulator's kubelets, and tests) ---------------------
    def add_pod(self, name: str, namespace: str = "default", *, qos_class: str | None = None,
                **options: Any) -> dict[str, Any]:
        """Create a pod (see `objects.pod_object` for the options)."""
        return self.create_pod(pod_object(name, namespace, qos_class_=qos_class, **options))

    def create_pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.store.write("pods", "ADDED", obj)

    def update_pod(self, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects["pods"][(namespace, name)])
        change(obj)
        return self.store.write("pods", "MODIFIED", obj)

    def delete_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.store.write("pods", "DELETED", copy.deepcopy(self.objects["pods"][(namespace, name)]))

    def add_node(self, name: str, **options: Any) -> dict[str, Any]:
        """Create a node (see `objects.node_object` for the options)."""
        return self.create_node(node_object(name, **options))

    def create_node(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.store.write("nodes", "ADDED", obj)

    def update_node(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects["nodes"][("", name)])
        change(obj)
        return self.store.write("nodes", "MODIFIED", obj)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects["pods"].get((namespace, name))

    def node(self, name: str) -> dict[str, Any] | None:
        return self.objects["nodes"].get(("", name))

    # -- HTTP -----------------------------------------------------------------------
    @web.middleware
    async def _record(self, request: web.Request, handler):
        if self.record_requests:
            self.requests.append((request.method, request.path, dict(request.query)))
            self.authorizations.append(request.headers.get("Authorization"))
        if self.on_request is not None:
            self.on_request(request.method, request.path)
        if late := self.delay(request.method, request.path):
            await asyncio.sleep(late)
        code = self.injected(request.method, request.path, request.query)
        if code is not None:
            return status(code, "InternalError" if code >= 500 else "Failure", f"injected {code}")
        return await self.server_side_apply.serve(request) or await handler(request)

    @staticmethod
    def _discovery(document: Callable[[], dict[str, Any]]):
        async def handle(request: web.Request) -> web.StreamResponse:
            return web.json_response(document())
        return handle

    def _get(self, resource: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            key = (request.match_info.get("ns", ""), request.match_info["name"])
            obj = self.objects[resource].get(key)
            if obj is None:
                return not_found(resource, key[1])
            return web.json_response(obj)
        return handle

    def _patch(self, resource: str, only: str | None = None):
        """A merge or strategic merge patch of the object (or, for a
        subresource, of `only` that part)."""
        async def handle(request: web.Request) -> web.StreamResponse:
            key = (request.match_info.get("ns", ""), request.match_info["name"])
            if request.content_type not in MERGE_TYPES:
                return status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                              f"{request.content_type}")
            obj = self.objects[resource].get(key)
            if obj is None:
                return not_found(resource, key[1])
            patch = await request.json()
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != obj["metadata"]["resourceVersion"]:
                return status(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{key[1]}": the object '
                              "has been modified; please apply your changes to the latest version and try again")
            if only is not None:
                patch = {only: patch.get(only)} if only in patch else {}
            patched = apply_patch(request.content_type, resource, obj, patch)
            patched["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            if patched == obj:  # a no-op write does not bump the resourceVersion
                return web.json_response(obj)
            return web.json_response(self.store.write(resource, "MODIFIED", patched))
        return handle

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
            limit, token = request.query.get("limit"), request.query.get("continue")
            table = tables.wants_table(request.headers.get("Accept", ""))
            # a continued list pages its first page's snapshot: the objects now are not read for it
            items = [] if token and not table else \
                [o for o in self.objects[resource].values() if watcher.wants(resource, o)]
            if table:
                found = tables.table(resource, items, str(self.rv), request.query.get("includeObject", "Metadata"))
                if found is not None:
                    return web.json_response(found)
            metadata: dict[str, Any] = {"resourceVersion": str(self.rv)}
            if limit or token:
                if not token:  # kept in key order for the pages after
                    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
                try:
                    items, metadata = self.pages.page(items, str(self.rv), int(limit or 0), token)
                except ContinueError as exc:
                    return status(exc.code, "Expired" if exc.code == 410 else "BadRequest", str(exc))
                except ValueError:
                    return status(400, "BadRequest", f"limit {limit!r} is not an integer")
            listed = []
            for item in items:  # list items carry no apiVersion/kind
                item = dict(item)
                item.pop("apiVersion", None)
                item.pop("kind", None)
                listed.append(item)
            return web.json_response({"kind": f"{KINDS[resource]}List", "apiVersion": "v1",
                                      "metadata": metadata, "items": listed})
        return handle

    async def _watch(self, request: web.Request, watcher: Watcher) -> web.StreamResponse:
        return await serve_watch(request, self.store, watcher, self.bookmark_interval_s)
