"""Fault injection for tests of whatever talks to the API server: what a
real API server does under load, a PodDisruptionBudget, or a compaction
(the `KubeApiServer` methods below; the server consults `injected` and
`take` as it answers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .store import Store


class FaultInjection:
    """Mixed into `KubeApiServer`: its store and request log are theirs."""

    store: Store
    requests: list[tuple[str, str, dict[str, str]]]

    def __init__(self) -> None:
        self._blocked: dict[tuple[str, str], int] = {}
        self._conflicts: dict[tuple[str, str], int] = {}
        self._failures: list[list[Any]] = []
        self._delays: list[tuple[str, str, float]] = []

    def compact(self) -> None:
        """Forget history: a watch from any older resourceVersion gets 410."""
        self.store.compact()

    def break_watches(self, mode: str = "abort") -> int:
        """Break every open watch after what it was sent so far: `abort` the
        connection, end the stream (`eof`), or send half a line then abort
        (`partial`). Returns how many were broken."""
        for watcher in self.store.watchers:
            watcher.queue.put_nowait(("END", mode))
        return len(self.store.watchers)

    def send_bookmarks(self) -> None:
        for watcher in self.store.watchers:
            if watcher.bookmarks:
                watcher.queue.put_nowait(self.store.bookmark(watcher.resource))

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

    def slow(self, method: str, path_part: str, seconds: float) -> None:
        """Answer every request whose path contains `path_part` `seconds` late
        (an API server under load, or far away)."""
        self._delays.append((method.upper(), path_part, seconds))

    def delay(self, method: str, path: str) -> float:
        """How late to answer this request (0: at once)."""
        return sum(seconds for wanted, part, seconds in self._delays if method == wanted and part in path)

    def count(self, method: str, path_part: str, **query: str) -> int:
        return sum(1 for m, p, q in self.requests if m == method and path_part in p
                   and all(q.get(k) == v for k, v in query.items()))

    def injected(self, method: str, path: str, query: Mapping[str, str]) -> int | None:
        """The status code to answer this request with instead, if one was injected (counted down)."""
        for failure in self._failures:
            wanted, part, code, times, values = failure
            if times > 0 and method == wanted and part in path and all(query.get(k) == v for k, v in values.items()):
                failure[3] -= 1
                return code
        return None

    @staticmethod
    def take(faults: dict[tuple[str, str], int], namespace: str, name: str) -> bool:
        """Whether one of the faults set for this pod is due now (counted down)."""
        if faults.get((namespace, name), 0) <= 0:
            return False
        faults[(namespace, name)] -= 1
        return True
