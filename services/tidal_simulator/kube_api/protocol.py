"""The pieces of the Kubernetes API protocol the simulated API server
speaks (pure): Status bodies, JSON merge patches, field selectors and the
per-watch filter."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from tidal_clock import now_utc

MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
FIELDS = {"pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName", "status.phase"},
          "nodes": {"metadata.name", "spec.unschedulable"}}
CUSTOM_FIELDS = {"metadata.name", "metadata.namespace"}  # what every custom resource supports
KINDS = {"pods": "Pod", "nodes": "Node", "events": "Event"}


def stamp(when: datetime) -> str:
    """A time as the API server writes it (RFC 3339, whole seconds, UTC)."""
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def now_stamp() -> str:
    return stamp(now_utc())


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A `Status` object as the API server answers errors (and some successes)."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 300 else "Success",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def status(code: int, reason: str, message: str, **details: Any) -> web.Response:
    return web.json_response(status_body(code, reason, message, **details), status=code)


def not_found(resource: str, name: str) -> web.Response:
    return status(404, "NotFound", f'{resource} "{name}" not found', name=name, kind=resource)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces.
    A strategic merge patch is applied the same way, which is exact for every
    field Tidal patches (annotations; `spec.taints`, a list without a merge key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def field_value(obj: dict[str, Any], path: str) -> str:
    """A field as a field selector compares it (`spec.unschedulable` is "false" when unset)."""
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
                if name not in FIELDS.get(resource, CUSTOM_FIELDS if "." in resource else ()):
                    raise ValueError(f'field label not supported: {name}')
                terms.append((name, equal, value))
                break
    return terms


@dataclass
class Watcher:
    """One open watch (or a list's filter): resource, namespace, field selector."""

    resource: str
    namespace: str | None
    selector: list[tuple[str, bool, str]]
    bookmarks: bool = False
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    def wants(self, resource: str, obj: dict[str, Any]) -> bool:
        if resource != self.resource:
            return False
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        return all((field_value(obj, name) == value) == equal for name, equal, value in self.selector)
