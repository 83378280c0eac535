"""The pods the agent knows, from pod lifecycle events: which run here, and
their cgroup uid, QoS class and exclusive CPUs; and whether an action may
touch a pod at all.

Every agent reads every pod event of its cluster, so what it keeps of the
pods of *other* nodes is paid on every node, under the DaemonSet's memory
limit. A pod of this node is kept whole; of any other pod only what the
books and `owned` ask of it (`PodElsewhere`: where it is, in which phase,
its uid and the decision that bound it), a tenth of the memory of the
whole event (`bench/cluster_pods.py`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

from tidal_runtime import packed_id, read_as_text
from tidal_schemas import HOLDING_PHASES, PodLifecycle

from .cgroup_paths import check_uid

Refusal = Literal["unknown-pod", "refused"]


def shown(text: object, limit: int = 80) -> str:
    """`text` quoted for a reason, cut to `limit` characters: event data
    echoed back must stay short and printable."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[: limit - 5] + "…'"


@dataclass(frozen=True, slots=True)
class PodElsewhere:
    """What the agent keeps of a pod not on its node: what `books.on_decision`
    reads of a pod (a decision for a pod bound by another is ignored) and
    what `owned` says of it."""

    packed_uid: int | str  # the ids as `tidal_runtime.packed_id` keeps them: 80 bytes less a pod Tidal placed
    phase: str
    node: str | None
    packed_decision_id: int | str

    uid = read_as_text("packed_uid")
    decision_id = read_as_text("packed_decision_id")

    @staticmethod
    def of(pod: PodLifecycle) -> "PodElsewhere":
        # node names and phases each kept once, however many pods name them
        return PodElsewhere(packed_id(pod.uid), sys.intern(pod.phase), sys.intern(pod.node) if pod.node else None,
                            packed_id(pod.decision_id))


class NodePods:
    def __init__(self, node: str) -> None:
        self.node = node
        self._here: dict[str, PodLifecycle] = {}
        self._elsewhere: dict[str, PodElsewhere] = {}

    def apply(self, pod: PodLifecycle) -> None:
        key = pod.event_key()
        if pod.phase == "deleted":
            self._here.pop(key, None)
            self._elsewhere.pop(key, None)
        elif pod.node == self.node:
            self._here[key] = pod
            self._elsewhere.pop(key, None)
        else:
            self._elsewhere[key] = PodElsewhere.of(pod)
            self._here.pop(key, None)

    def get(self, key: str) -> PodLifecycle | PodElsewhere | None:
        """The latest event of pod `key` if it is on this node, what is kept
        of it if it is elsewhere, None if unknown or deleted."""
        pod = self._here.get(key)
        return pod if pod is not None else self._elsewhere.get(key)

    def here(self) -> list[PodLifecycle]:
        """Pods bound to or running on this node."""
        return [p for p in self._here.values() if p.phase in HOLDING_PHASES]

    def by_uid(self) -> dict[str, PodLifecycle]:
        return {p.uid: p for p in self.here() if p.uid}

    def owned(self, key: object) -> tuple[PodLifecycle | None, Refusal | None, str]:
        """(pod, None, "") when this agent may act on pod `key`: known,
        bound or running on this node, with a well-formed uid that no other
        pod here claims. Otherwise (None, status, why) — nothing is touched."""
        pod = self._here.get(key) if isinstance(key, str) else None
        if pod is None:
            other = self._elsewhere.get(key) if isinstance(key, str) else None
            if other is None:
                return None, "unknown-pod", f"no pod {shown(key)} known to the agent of {self.node}"
            where = f"runs on {other.node}" if other.node else "is not placed on any node"
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
