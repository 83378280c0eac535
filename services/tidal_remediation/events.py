"""A round plan as `node.action` events.

    action_id = derived_id("remediation@<round time, ISO>", "node.action",
                           node, "<kind>:<pod>")

a UUID5 of node, pod, kind and round time: re-planning the same round (a
replay, a redelivered metrics sample) gives the same ids, so consumers and
the bus's duplicate window drop the copies. `measured` carries the loads
and everything the memory needs to be rebuilt (keys in `measured.py`).
"""

from __future__ import annotations

from tidal_schemas import NodeAction, derived_id

from . import measured as m
from .plan import PlannedAction, RoundPlan


def action_id(node: str, pod: str, kind: str, round_iso: str) -> str:
    """The deterministic id of `kind` on `pod` decided in the round at
    `round_iso`."""
    return derived_id(f"remediation@{round_iso}", NodeAction.TYPE, node, f"{kind}:{pod}")


def _measured(action: PlannedAction, at: float) -> dict[str, float]:
    figures = {m.AT: at, m.SENT_AT: at, m.ATTEMPT: 1.0, m.NUMA: float(action.numa),
               m.LOAD: action.measured_load, m.LOAD_BEFORE: action.load_before,
               m.PROJECTED: action.projected_load, m.THRESHOLD: action.threshold}
    if action.pod_cpu_milli is not None:
        figures[m.POD_CPU] = action.pod_cpu_milli
    figures.update(m.encode_shares(action.shares))
    if action.kind == "set-cpuset":
        figures[m.TARGET_NUMA] = float(action.target_numa)
        figures[m.TARGET_LOAD] = action.target_load
        figures[m.TARGET_PROJECTED] = action.target_projected
        figures.update(m.encode_cpus(action.from_cpuset))
    return figures


def actions_to_events(plan: RoundPlan, node: str, requested_by: str = "remediation") -> list[NodeAction]:
    """One `NodeAction` per planned action, in plan order, with the reason,
    the dry-run mark, a deterministic id and the load figures; a move names
    its target NUMA node and CPU count, never CPUs."""
    if node != plan.node:
        raise ValueError(f"plan of node {plan.node} published as node {node}")
    at = m.to_epoch(plan.at)
    iso = m.from_epoch(at).isoformat()  # one id per instant, whatever the time zone
    return [NodeAction(action_id=action_id(node, a.pod, a.kind, iso), node=node, kind=a.kind, pod=a.pod,
                       target_numa=a.target_numa, cpu_count=a.cpu_count, reason=a.reason,
                       measured=_measured(a, at), dry_run=a.dry_run, requested_by=requested_by)
            for a in plan.actions]
