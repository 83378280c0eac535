"""What to do with actions that got no result (retry policy, pure).

A pending action whose current attempt was sent at least `timeout` ago is

    re-sent       when attempt ≤ max_retries   (so 1 + max_retries sends in all)
    given up      otherwise — as a `failed` ActionResult with the reason,
                  which the service publishes and records like any result,
                  so the give-up is in the log and a rebuild repeats it.

A re-send is the same action (same `action_id`, so its result settles the
one pending entry) with `measured.attempt` + 1 and `measured.sent_at` = now;
the service must give it its own envelope id (e.g. `derived_id(...,
discriminator=f"attempt-{n}")`) or the bus's duplicate window drops it.
Every remediation action is idempotent on the node (freezing a frozen pod,
thawing a running one, setting the same cpuset), so a re-send that races a
late first attempt does no harm.

Giving up follows the memory's rules for `failed`: a freeze given up counts
as not frozen (if the agent did freeze it, the planner sees `frozen` in the
metrics and thaws it as an unrecorded frozen pod); a thaw given up leaves
the pod frozen, so a later round thaws it again; a move given up is
forgotten (the metrics' cpuset is the truth).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tidal_schemas import ActionResult, NodeAction

from . import measured as m
from .memory import RemediationMemory


@dataclass(frozen=True)
class RetryPlan:
    """Actions to send again, and results that give actions up."""

    resend: list[NodeAction]
    give_up: list[ActionResult]


def plan_retries(memory: RemediationMemory, now: datetime, timeout_s: float, max_retries: int) -> RetryPlan:
    """For every pending action with now − sent_at ≥ timeout_s, oldest first:
    the re-sent action (attempt + 1) while attempt ≤ max_retries, else a
    `failed` result saying why it was given up."""
    resend: list[NodeAction] = []
    give_up: list[ActionResult] = []
    for pending in sorted(memory.pending.values(), key=lambda p: (p.sent_at, p.action.action_id)):
        waited = (now - pending.sent_at).total_seconds()
        if waited < timeout_s:
            continue
        action = pending.action
        if pending.attempt <= max_retries:
            resend.append(action.model_copy(update={"measured": {
                **action.measured, m.ATTEMPT: float(pending.attempt + 1), m.SENT_AT: m.to_epoch(now)}}))
            continue
        give_up.append(ActionResult(
            action_id=action.action_id, node=action.node, kind=action.kind, pod=action.pod, status="failed",
            reason=(f"gave up: no result for {action.kind} of {action.pod} after {pending.attempt} attempt(s), "
                    f"the last sent {waited:.0f}s ago (timeout {timeout_s:g}s, max retries {max_retries})")))
    return RetryPlan(resend, give_up)
