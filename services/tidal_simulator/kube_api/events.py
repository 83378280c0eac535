"""core/v1 Events as the API server keeps them: create, get, patch (how client-go's
event correlator counts a repeat: `count` and `lastTimestamp` patched on
the one Event object), and lists filtered by field selector (how `kubectl
describe pod` finds a pod's events: `involvedObject.name=…,
involvedObject.namespace=…,involvedObject.uid=…`).

Every write here stamps the store's next resourceVersion, as the server's
writes do.
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from .protocol import MERGE_TYPES, field_value, not_found, now_stamp, status
from .strategic import apply_patch

FIELDS = {"involvedObject.kind", "involvedObject.name", "involvedObject.namespace", "involvedObject.uid",
          "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
          "reason", "reportingComponent", "source", "type", "metadata.name", "metadata.namespace"}


def event_selector(text: str | None) -> list[tuple[str, bool, str]]:
    """`a=b,c!=d` over the fields the API server indexes for events;
    ValueError naming an unsupported field."""
    terms = []
    for term in filter(None, (text or "").split(",")):
        for op, equal in (("!=", False), ("==", True), ("=", True)):
            if op in term:
                name, value = term.split(op, 1)
                if name not in FIELDS:
                    raise ValueError(f"field label not supported: {name}")
                terms.append((name, equal, value))
                break
        else:
            raise ValueError(f"invalid selector: {term!r}")
    return terms


def selected(event: dict[str, Any], terms: list[tuple[str, bool, str]]) -> bool:
    def value(name: str) -> str:
        return str((event.get("source") or {}).get("component", "")) if name == "source" \
            else field_value(event, name)
    return all((value(name) == wanted) == equal for name, equal, wanted in terms)


class EventRoutes:
    """The handlers, over the server's `events` dict and its store."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def create(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        body = await request.json()
        name = (body.get("metadata") or {}).get("name") or f"event.{uuid.uuid4().hex[:16]}"
        if (ns, name) in self.server.events:
            return status(409, "AlreadyExists", f'events "{name}" already exists', name=name, kind="events")
        self.server.store.rv += 1
        body["metadata"] = {**body.get("metadata", {}), "name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                            "resourceVersion": str(self.server.rv), "creationTimestamp": now_stamp()}
        self.server.events[(ns, name)] = body
        return web.json_response(body, status=201)

    async def get(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        event = self.server.events.get((ns, name))
        return not_found("events", name) if event is None else web.json_response(event)

    async def patch(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if request.content_type not in MERGE_TYPES:
            return status(415, "UnsupportedMediaType",
                          f"the body of the request was in an unknown format: {request.content_type}")
        event = self.server.events.get((ns, name))
        if event is None:
            return not_found("events", name)
        patch = await request.json()
        if not isinstance(patch, dict):
            return status(400, "BadRequest", "the patch is not a JSON object")
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != event["metadata"]["resourceVersion"]:
            return status(409, "Conflict", f'Operation cannot be fulfilled on events "{name}": the object has '
                          "been modified; please apply your changes to the latest version and try again")
        patched = apply_patch(request.content_type, "events", event, patch)
        # identity is the server's, whatever the patch says
        patched["metadata"] = {**patched.get("metadata", {}), **{k: event["metadata"][k] for k in
                                                                 ("name", "namespace", "uid", "creationTimestamp")}}
        if patched != event:
            self.server.store.rv += 1
            patched["metadata"]["resourceVersion"] = str(self.server.rv)
            self.server.events[(ns, name)] = patched
        return web.json_response(patched)

    async def list(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info.get("ns")
        try:
            terms = event_selector(request.query.get("fieldSelector"))
        except ValueError as exc:
            return status(400, "BadRequest", str(exc))
        items = [e for (namespace, _), e in self.server.events.items()
                 if (ns is None or namespace == ns) and selected(e, terms)]
        return web.json_response({"kind": "EventList", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": str(self.server.rv)}, "items": items})
