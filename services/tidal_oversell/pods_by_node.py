"""The pods holding resources on each node, kept by node: oversell reads a
node's pods on every sample of that node (500 a second at 5,000 nodes), so
finding them must not cost a pass over every pod of the cluster."""

from __future__ import annotations

from tidal_schemas import HOLDING_PHASES, PodLifecycle


class PodsByNode:
    def __init__(self) -> None:
        self._on: dict[tuple[str, str], dict[str, PodLifecycle]] = {}  # (cluster, node) -> pod key -> pod
        self._node_of: dict[tuple[str, str], str] = {}  # (cluster, pod key) -> the node it is kept under

    def apply(self, cluster: str, pod: PodLifecycle) -> None:
        """Keep the pod under its node while it holds resources there (a
        later event may move it, or end its hold)."""
        key = pod.event_key()
        was = self._node_of.pop((cluster, key), None)
        if was is not None:
            held = self._on[cluster, was]
            del held[key]
            if not held:
                del self._on[cluster, was]
        if pod.phase in HOLDING_PHASES and pod.node:
            self._node_of[cluster, key] = pod.node
            self._on.setdefault((cluster, pod.node), {})[key] = pod

    def on(self, cluster: str, node: str) -> list[PodLifecycle]:
        """The pods holding resources on `node`, by pod key."""
        held = self._on.get((cluster, node), {})
        return [held[key] for key in sorted(held)]

    def __len__(self) -> int:
        return len(self._node_of)
