"""The API server's storage: objects by resource and key, one global
resourceVersion counter stamped on every write, the history a watch replays
from, and the open watches each write is handed to.

A watch from a resourceVersion older than the history kept gets 410 Gone;
`history_limit` compacts on its own as etcd does (None keeps everything).
`listeners` are called with (resource, kind, object) after every write: the
simulated kubelets follow the cluster this way.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from typing import Any

from .protocol import KINDS, Watcher

Listener = Callable[[str, str, dict[str, Any]], None]


class Store:
    def __init__(self, history_limit: int | None = None) -> None:
        self.rv = 0
        self.oldest_rv = 0
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"pods": {}, "nodes": {}}
        self.history: deque[tuple[int, str, str, dict[str, Any]]] = deque()
        self.history_limit = history_limit
        self.watchers: list[Watcher] = []
        self.listeners: list[Listener] = []

    @staticmethod
    def key(resource: str, obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj["metadata"]
        return (meta.get("namespace", "") if resource == "pods" else "", meta["name"])

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects[resource].get((namespace, name))

    def write(self, resource: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store (or, for DELETED, remove) `obj` at the next resourceVersion,
        tell every watch and listener; a copy of what was written."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = self.key(resource, obj)
        if kind == "DELETED":
            self.objects[resource].pop(key, None)
        else:
            self.objects[resource][key] = obj
        snapshot = copy.deepcopy(obj)
        self.history.append((self.rv, resource, kind, snapshot))
        if self.history_limit is not None and len(self.history) > self.history_limit:
            self.oldest_rv = self.history.popleft()[0]
        for watcher in self.watchers:
            if watcher.wants(resource, snapshot):
                watcher.queue.put_nowait((kind, snapshot))
        for listener in self.listeners:
            listener(resource, kind, snapshot)
        return copy.deepcopy(obj)

    def compact(self) -> None:
        """Forget history: a watch from any older resourceVersion gets 410."""
        self.history.clear()
        self.oldest_rv = self.rv

    def since(self, watcher: Watcher, resource_version: str) -> list[tuple[str, dict[str, Any]]]:
        """What a watch from `resource_version` is owed first: every object
        (as ADDED) from "" or "0", else every later change it wants."""
        if resource_version in ("", "0"):
            return [("ADDED", copy.deepcopy(o)) for o in self.objects[watcher.resource].values()
                    if watcher.wants(watcher.resource, o)]
        since = int(resource_version)
        return [(kind, copy.deepcopy(o)) for rv, res, kind, o in self.history
                if rv > since and watcher.wants(res, o)]

    def expired(self, resource_version: str) -> bool:
        return resource_version not in ("", "0") and int(resource_version) < self.oldest_rv

    def bookmark(self, resource: str) -> tuple[str, dict[str, Any]]:
        return ("BOOKMARK", {"kind": KINDS[resource], "apiVersion": "v1",
                             "metadata": {"resourceVersion": str(self.rv)}})
