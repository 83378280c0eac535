"""Why a pod is pending, in kube-scheduler's words (pure): the message of
its `PodScheduled=False` condition and `FailedScheduling` event, and the
status patch that sets the condition.

The message is kube-scheduler's `FitError`: "0/N nodes are available:"
then either the nodes filtered out, counted by reason and sorted as
strings (`3 Insufficient cpu, 2 node(s) had untolerated taint {k: }`), or
— when a rule stopped the pod before any node was looked at, as a
PreFilter plugin does — Tidal's own reason (a tenant quota or permission,
an invalid pod, the higher-priority pod it waits behind), then ".". A
filter reason without a phrase here (a node's stale metrics) is shown as
"node(s) took no new pods (<reason>)", so nothing is hidden.

Cluster Autoscaler and Karpenter read the condition: `Unschedulable` is
what makes them consider adding a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tidal_schemas import PlacementDecision
from tidal_schemas.filters import NODE_FILTERS

POD_SCHEDULED = "PodScheduled"
UNSCHEDULABLE = "Unschedulable"
FAILED_SCHEDULING = "FailedScheduling"
MAX_MESSAGE = 4096

# placement's filter reasons -> kube-scheduler's phrasing of the same filter
PHRASES = {name: f.phrase for name, f in NODE_FILTERS.items()}
FALLBACK = "node(s) took no new pods ({reason})"
NO_NODES = "no nodes available to schedule pods"  # kube-scheduler's ErrNoNodesAvailable


def phrase(reason: str, gpu_resource: str = "nvidia.com/gpu") -> str:
    """kube-scheduler's words for nodes filtered out for `reason`."""
    template = PHRASES.get(reason)
    return FALLBACK.format(reason=reason) if template is None else template.format(gpu_resource=gpu_resource)


def fit_error(nodes: int, filtered: Mapping[str, int], rule: str = "", gpu_resource: str = "nvidia.com/gpu") -> str:
    """ "0/`nodes` nodes are available: …." from the per-reason counts, or
    from `rule` (a reason no node was looked at for) when none were counted."""
    if filtered:
        detail = ", ".join(sorted(f"{count} {phrase(reason, gpu_resource)}"
                                  for reason, count in filtered.items() if count))
    else:
        detail = rule.strip().rstrip(".")
    text = f"0/{nodes} nodes are available" + (f": {detail}." if detail else ".")
    return text[:MAX_MESSAGE]


def decision_message(decision: PlacementDecision, gpu_resource: str = "nvidia.com/gpu") -> str:
    """The message for a `pending` decision. Its node count is the
    decision's `nodes`; a decision from before that field existed counts
    the nodes it filtered out (each is counted under exactly one reason).
    A cluster without nodes says so, whatever else held the pod."""
    nodes = decision.nodes if decision.nodes is not None else sum(decision.filtered.values())
    if not nodes and not decision.filtered:
        return NO_NODES
    return fit_error(nodes, decision.filtered, decision.reason, gpu_resource)


def stamp(when: datetime) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def scheduled_condition(message: str, since: datetime | None = None) -> dict[str, Any]:
    """`PodScheduled=False`, reason `Unschedulable`. `since` (the first time
    the pod was found unschedulable) is its lastTransitionTime; without it
    the patch leaves the time already on the pod (conditions merge by type)."""
    condition = {"type": POD_SCHEDULED, "status": "False", "reason": UNSCHEDULABLE, "message": message}
    if since is not None:
        condition["lastTransitionTime"] = stamp(since)
    return condition


def status_patch(condition: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of pods/status setting one condition (the
    API server merges `status.conditions` by type: the others stay)."""
    return {"status": {"conditions": [condition]}}
