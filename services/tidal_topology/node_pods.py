"""The pods the agent knows, from pod lifecycle events: which run here, and
their cgroup uid, QoS class and exclusive CPUs."""

from __future__ import annotations

from tidal_schemas import PodLifecycle


class NodePods:
    def __init__(self, node: str) -> None:
        self.node = node
        self._pods: dict[str, PodLifecycle] = {}

    def apply(self, pod: PodLifecycle) -> None:
        key = pod.event_key()
        if pod.phase == "deleted":
            self._pods.pop(key, None)
        else:
            self._pods[key] = pod

    def get(self, key: str) -> PodLifecycle | None:
        return self._pods.get(key)

    def here(self) -> list[PodLifecycle]:
        """Pods bound to or running on this node."""
        return [p for p in self._pods.values() if p.node == self.node and p.phase in ("bound", "running")]

    def by_uid(self) -> dict[str, PodLifecycle]:
        return {p.uid: p for p in self.here() if p.uid}
