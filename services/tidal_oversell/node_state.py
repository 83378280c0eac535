"""What oversell remembers per node, and what its own action log says.

The action log (`node.action` events it published, and their results) is
the authority on taints and evictions already asked for, so a restart never
repeats an eviction: the log, not a replay of old metrics, decides."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tidal_schemas import ActionResult, NodeAction, NodeTopology, PeakEstimate, PodLifecycle


@dataclass
class NodeView:
    """Latest facts about one node."""

    topology: NodeTopology | None = None
    peak: PeakEstimate | None = None
    factors: dict[str, float] = field(default_factory=dict)  # per resource, the last one granted


@dataclass
class ActionLog:
    """Taints and evictions this service asked for, per (cluster, node/pod)."""

    tainted: dict[tuple[str, str], bool] = field(default_factory=dict)
    evictions: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (cluster, pod) -> asked at
    last_round: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (cluster, node) -> last eviction
    actions: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # action id -> (kind, pod)

    def record(self, cluster: str, action: NodeAction, at: datetime) -> None:
        if action.dry_run or action.action_id in self.actions:
            return
        self.actions[action.action_id] = (action.kind, action.pod)
        if action.kind in ("taint", "untaint"):
            self.tainted[(cluster, action.node)] = action.kind == "taint"
        elif action.kind == "evict" and action.pod:
            self.evictions[(cluster, action.pod)] = at
            self.last_round[(cluster, action.node)] = max(at, self.last_round.get((cluster, action.node), at))

    def result(self, cluster: str, result: ActionResult) -> None:
        """A failed eviction may be asked again; a done one waits for the pod to go."""
        kind, pod = self.actions.get(result.action_id, (None, None))
        if kind == "evict" and pod and result.status in ("failed", "refused", "unknown-pod"):
            self.evictions.pop((cluster, pod), None)

    def pod_gone(self, cluster: str, pod: PodLifecycle) -> None:
        self.evictions.pop((cluster, pod.event_key()), None)

    def eviction_pending(self, cluster: str, pod: str, now: datetime, timeout_s: float) -> bool:
        asked = self.evictions.get((cluster, pod))
        return asked is not None and now - asked < timedelta(seconds=timeout_s)

    def cooling_down(self, cluster: str, node: str, now: datetime, cooldown_s: float) -> bool:
        last = self.last_round.get((cluster, node))
        return last is not None and now - last < timedelta(seconds=cooldown_s)
