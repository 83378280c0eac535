"""The pods the agent knows, from pod lifecycle events: which run here, and
their cgroup uid, QoS class and exclusive CPUs; and whether an action may
touch a pod at all."""

from __future__ import annotations

from typing import Literal

from tidal_schemas import HOLDING_PHASES, PodLifecycle

from .cgroup_paths import check_uid

Refusal = Literal["unknown-pod", "refused"]


def shown(text: object, limit: int = 80) -> str:
    """`text` quoted for a reason, cut to `limit` characters: event data
    echoed back must stay short and printable."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[: limit - 5] + "…'"


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
        return [p for p in self._pods.values() if p.node == self.node and p.phase in HOLDING_PHASES]

    def by_uid(self) -> dict[str, PodLifecycle]:
        return {p.uid: p for p in self.here() if p.uid}

    def owned(self, key: object) -> tuple[PodLifecycle | None, Refusal | None, str]:
        """(pod, None, "") when this agent may act on pod `key`: known,
        bound or running on this node, with a well-formed uid that no other
        pod here claims. Otherwise (None, status, why) — nothing is touched."""
        pod = self._pods.get(key) if isinstance(key, str) else None
        if pod is None:
            return None, "unknown-pod", f"no pod {shown(key)} known to the agent of {self.node}"
        if pod.node != self.node:
            where = f"runs on {pod.node}" if pod.node else "is not placed on any node"
            return None, "refused", f"pod {shown(key)} {where}, not on {self.node}"
        if pod.phase not in HOLDING_PHASES:
            return None, "refused", f"pod {shown(key)} is {pod.phase}, not bound or running here"
        problem = check_uid(pod.uid)
        if problem:
            return None, "refused", f"pod {shown(key)}: {shown(problem, 160)}"
        sharing = sorted(other.event_key() for other in self.here() if other.uid == pod.uid and other is not pod)
        if sharing:
            return None, "refused", f"pod {shown(key)}: uid {pod.uid} is also claimed by {shown(sharing[0])}"
        return pod, None, ""
