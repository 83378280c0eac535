"""What oversell remembers per node, and what its own action log says.

The action log (`node.action` events it published, and their results) is
the authority on taints and evictions already asked for, so a restart never
repeats an eviction: the log, not a replay of old metrics, decides."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tidal_policy.action_memory import ActionMemory
from tidal_schemas import ActionResult, NodeAction, NodeTopology, PeakEstimate, PodLifecycle


def inventory(topology: NodeTopology) -> NodeTopology:
    """What oversell keeps of a topology: the node's name, pool, capacity and
    allocatable. Its CPU, NUMA and GPU lists are most of the event's memory
    (~28 KiB for 64 CPUs: 140 MiB at 5,000 nodes) and oversell reads none."""
    return topology.model_copy(update={"cpus": [], "numa_nodes": [], "reserved_cpus": [], "gpus": [], "labels": {}})


@dataclass
class NodeView:
    """Latest facts about one node."""

    topology: NodeTopology | None = None
    peak: PeakEstimate | None = None
    peak_sampled_at: datetime | None = None  # the sample `peak` was estimated at
    factors: dict[str, float] = field(default_factory=dict)  # per resource, the last one granted


@dataclass
class ActionLog:
    """Taints and evictions this service asked for, per (cluster, node/pod),
    over the shared memory of actions (pending, settled, last eviction per
    (cluster, node) for the cool-down)."""

    tainted: dict[tuple[str, str], bool] = field(default_factory=dict)
    evictions: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (cluster, pod) -> asked at
    actions: ActionMemory = field(default_factory=ActionMemory)

    def record(self, cluster: str, action: NodeAction, at: datetime) -> None:
        """An action sent at `at` (unless it says when itself)."""
        if self.actions.sent(action, at) != "new":
            return
        when = self.actions.pending[action.action_id].sent_at
        if action.kind in ("taint", "untaint"):
            self.tainted[(cluster, action.node)] = action.kind == "taint"
        elif action.kind == "evict" and action.pod:
            self.evictions[(cluster, action.pod)] = when
            self.actions.acted((cluster, action.node), when)

    def result(self, cluster: str, result: ActionResult) -> None:
        """A failed eviction may be asked again; a done one waits for the pod to go."""
        pending = self.actions.answered(result)
        if pending is None:
            return
        action = pending.action
        if action.kind == "evict" and action.pod and result.status in ("failed", "refused", "unknown-pod"):
            self.evictions.pop((cluster, action.pod), None)

    def pod_gone(self, cluster: str, pod: PodLifecycle) -> None:
        self.evictions.pop((cluster, pod.event_key()), None)

    def eviction_pending(self, cluster: str, pod: str, now: datetime, timeout_s: float) -> bool:
        asked = self.evictions.get((cluster, pod))
        return asked is not None and now - asked < timedelta(seconds=timeout_s)

    def cooling_down(self, cluster: str, node: str, now: datetime, cooldown_s: float) -> bool:
        return self.actions.cooling_down((cluster, node), now, cooldown_s)
