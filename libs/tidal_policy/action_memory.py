"""What a service remembers of the node actions it asked for: one memory
for oversell and remediation (DESIGN: state is rebuilt from the log).

It changes only through `sent(action)` and `answered(result)` and reads
nothing but those payloads, so replaying `node.action` (the service's own)
and `action.result` in order gives the memory a live service reached.

    sent      dry run          → nothing remembered
              settled id       → nothing (a late redelivery)
              pending id       → a later attempt restarts its clock; an
                                 earlier or equal one changes nothing
              new id           → pending, attempt 1 (or the one it names)
    answered  pending id       → settled with the result's status
              anything else    → nothing

An attempt's number and send time travel in the action itself
(`measured["attempt"]`, `measured["sent_at"]`, epoch seconds), so a rebuilt
memory knows which attempt is out and since when. `plan_retries` is the one
retry policy: re-send (same action id, attempt + 1) or give up as a `failed`
result, which the service publishes and records like any other.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from tidal_schemas import ActionResult, NodeAction

ATTEMPT = "attempt"
SENT_AT = "sent_at"


@dataclass(frozen=True)
class PendingAction:
    """An action sent and not yet answered: the action, when this attempt
    was sent, and which attempt it is (1 = first)."""

    action: NodeAction
    sent_at: datetime
    attempt: int = 1


@dataclass(frozen=True)
class RetryPlan:
    """Actions to send again, and results that give actions up."""

    resend: list[NodeAction]
    give_up: list[ActionResult]


def sent_at(action: NodeAction, default: datetime) -> datetime:
    """When this attempt of `action` was sent: what it says, else `default`."""
    stamp = action.measured.get(SENT_AT)
    return default if stamp is None else datetime.fromtimestamp(stamp, tz=timezone.utc)


@dataclass
class ActionMemory:
    """Pending actions, the outcome of every settled action id, and when
    each scope (a node, a NUMA node of a node, …) was last acted on."""

    pending: dict[str, PendingAction] = field(default_factory=dict)
    settled: dict[str, str] = field(default_factory=dict)
    last_acted: dict[Hashable, datetime] = field(default_factory=dict)

    def sent(self, action: NodeAction, at: datetime) -> str:
        """Remember an action sent (or re-sent) at `at` unless it says when:
        "new", "retry", or why it changed nothing ("dry-run", "settled", "seen")."""
        if action.dry_run:
            return "dry-run"
        if action.action_id in self.settled:
            return "settled"
        attempt = int(action.measured.get(ATTEMPT, 1))
        known = self.pending.get(action.action_id)
        if known is not None:
            if attempt <= known.attempt:
                return "seen"
            self.pending[action.action_id] = PendingAction(known.action, sent_at(action, at), attempt)
            return "retry"
        self.pending[action.action_id] = PendingAction(action, sent_at(action, at), attempt)
        return "new"

    def answered(self, result: ActionResult) -> PendingAction | None:
        """Settle the action `result` answers; the pending entry, if it was one."""
        pending = self.pending.pop(result.action_id, None)
        if pending is not None:
            self.settled[result.action_id] = result.status
        return pending

    def forget(self, node: str, pod: str, status: str) -> None:
        """Settle every pending action on (node, pod) as `status`."""
        for action_id in [i for i, p in self.pending.items() if (p.action.node, p.action.pod) == (node, pod)]:
            del self.pending[action_id]
            self.settled[action_id] = status

    def pending_on(self, node: str) -> list[PendingAction]:
        """The unanswered actions on `node`, oldest first."""
        return sorted((p for p in self.pending.values() if p.action.node == node),
                      key=lambda p: (p.sent_at, p.action.action_id))

    def acted(self, scope: Hashable, at: datetime) -> None:
        """`scope` was acted on at `at` (the latest time is kept)."""
        last = self.last_acted.get(scope)
        self.last_acted[scope] = at if last is None else max(last, at)

    def cooling_down(self, scope: Hashable, now: datetime, cooldown_s: float) -> bool:
        last = self.last_acted.get(scope)
        return last is not None and now - last < timedelta(seconds=cooldown_s)


def plan_retries(memory: ActionMemory, now: datetime, timeout_s: float, max_retries: int) -> RetryPlan:
    """For every pending action whose current attempt was sent ≥ timeout_s
    ago, oldest first: re-sent (attempt + 1, sent_at = now) while
    attempt ≤ max_retries — so 1 + max_retries sends in all — else a
    `failed` result saying why it was given up. A re-send keeps its action
    id (its result settles the one pending entry); the caller gives it its
    own envelope id or the bus's duplicate window drops it."""
    resend: list[NodeAction] = []
    give_up: list[ActionResult] = []
    for pending in sorted(memory.pending.values(), key=lambda p: (p.sent_at, p.action.action_id)):
        waited = (now - pending.sent_at).total_seconds()
        if waited < timeout_s:
            continue
        action = pending.action
        if pending.attempt <= max_retries:
            resend.append(action.model_copy(update={"measured": {
                **action.measured, ATTEMPT: float(pending.attempt + 1), SENT_AT: now.timestamp()}}))
            continue
        give_up.append(ActionResult(
            action_id=action.action_id, node=action.node, kind=action.kind, pod=action.pod, status="failed",
            reason=(f"gave up: no result for {action.kind} of {action.pod} after {pending.attempt} attempt(s), "
                    f"the last sent {waited:.0f}s ago (timeout {timeout_s:g}s, max retries {max_retries})")))
    return RetryPlan(resend, give_up)
