"""What remediation remembers between rounds, and how it is rebuilt from the
log (SPEC §E; DESIGN "state is rebuilt from the log").

The memory changes only through `record_action(NodeAction)` and
`record_result(ActionResult)`, and reads nothing but those payloads (times
come from `measured`, see `measured.py`), so replaying the log in order —
`rebuild(events)` — yields the same memory as living through it. A restart
therefore still knows every pod it froze, and thaws it later.

Transitions (a result is matched to its action by `action_id`):

    action  freeze      → pod frozen (unconfirmed), pending
            thaw        → pending (the pod stays frozen until thawed is known)
            set-cpuset  → pod moved (unconfirmed), pending
            any         → last action time of (node, m) for the NUMA node
                          acted on, every NUMA node the pod's usage was
                          attributed to, and a move's target
    result  done        → freeze / move confirmed; thaw: pod no longer frozen
            failed, refused, skipped
                        → freeze: pod not frozen; move: not moved;
                          thaw: pod still frozen
            unknown-pod → every record of that pod on that node is forgotten

Freezes are believed at once (optimistic) so the next round neither
freezes the pod again nor mistakes the node for one whose BE pods still
run; thaws are believed only when done, so a lost thaw leaves the pod on
the list to thaw, never stranded. Dry-run actions change nothing. An
action or result seen twice (redelivery) changes nothing the second time.

Pending actions, attempts, settled ids, the last action per (node, NUMA)
and the retry policy are the shared `ActionMemory` (`tidal_policy`); what a
give-up means here follows the rules for `failed`: a freeze given up counts
as not frozen (if the agent did freeze it, the planner sees `frozen` in the
metrics and thaws it as an unrecorded frozen pod); a thaw given up leaves
the pod frozen, so a later round thaws it again; a move given up is
forgotten (the metrics' cpuset is the truth). Every remediation action is
idempotent on the node, so a re-send racing a late first attempt does no harm.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from tidal_policy.action_memory import ActionMemory, PendingAction
from tidal_schemas import ActionResult, NodeAction

from . import measured as m

REMEDIATION_KINDS = ("freeze", "thaw", "set-cpuset")
_REQUIRED = {kind: (m.AT, m.NUMA) for kind in REMEDIATION_KINDS}
_REQUIRED["freeze"] = (m.AT, m.NUMA, m.LOAD)
_REQUIRED["set-cpuset"] = (m.AT, m.NUMA, m.TARGET_NUMA)


@dataclass(frozen=True)
class FrozenPod:
    """A pod remediation froze: where, when, the load then, its usage."""

    node: str
    pod: str
    numa: int
    frozen_at: datetime
    load: float
    cpu_milli: float | None
    shares: tuple[tuple[int, float], ...]
    action_id: str
    confirmed: bool = False
    acted_at: datetime | None = None  # when the agent froze it, on its samples' clock (once confirmed)


@dataclass(frozen=True)
class MovedPod:
    """A latency-sensitive pod remediation moved to another NUMA node."""

    node: str
    pod: str
    from_cpuset: tuple[int, ...]
    from_numa: int
    to_numa: int
    moved_at: datetime
    action_id: str
    confirmed: bool = False


@dataclass
class RemediationMemory:
    """Frozen pods and moved pods, over the shared memory of actions
    (pending, settled, last action per (node, NUMA))."""

    frozen: dict[tuple[str, str], FrozenPod] = field(default_factory=dict)
    moved: dict[tuple[str, str], MovedPod] = field(default_factory=dict)
    actions: ActionMemory = field(default_factory=ActionMemory)
    # node -> its pods in `frozen`, kept by the writes below: each sample asks for
    # one node's, and a scan of every frozen pod of the cluster grows with the cluster
    _frozen_on: dict[str, dict[str, FrozenPod]] = field(default_factory=dict, init=False, repr=False,
                                                        compare=False)

    # --- reads

    def is_frozen(self, node: str, pod: str) -> bool:
        """Whether remediation believes it has `pod` on `node` frozen."""
        return (node, pod) in self.frozen

    def frozen_on(self, node: str) -> list[FrozenPod]:
        """The pods frozen on `node`, by name."""
        return sorted(self._frozen_on.get(node, {}).values(), key=lambda f: f.pod)

    def pending_on(self, node: str) -> list[PendingAction]:
        """The unanswered actions on `node`, oldest first."""
        return self.actions.pending_on(node)

    def last_action_at(self, node: str, numa: int) -> datetime | None:
        """When remediation last acted on that NUMA node, if ever."""
        return self.actions.last_acted.get((node, numa))

    # --- writes

    def record_action(self, action: NodeAction) -> str:
        """Apply an action sent (or re-sent) to the memory; what it did."""
        if action.kind not in REMEDIATION_KINDS or not action.pod:
            return f"ignored: {action.kind} is not a remediation action"
        if action.dry_run:
            return f"dry run: {action.kind} of {action.pod} not recorded"
        missing = [key for key in _REQUIRED.get(action.kind, ()) if key not in action.measured]
        if missing:
            return f"ignored: {action.action_id} lacks measured {', '.join(missing)}"
        at = m.from_epoch(action.measured[m.AT])
        attempt = int(action.measured.get(m.ATTEMPT, 1))
        outcome = self.actions.sent(action, at)
        if outcome == "settled":
            return f"ignored: {action.action_id} already settled ({self.actions.settled[action.action_id]})"
        if outcome == "seen":
            return f"ignored: attempt {attempt} of {action.action_id} already recorded"
        if outcome == "retry":
            return f"retry: attempt {attempt} of {action.kind} of {action.pod}"
        numa = int(action.measured[m.NUMA])
        key = (action.node, action.pod)
        # the pod's usage moves the load of every NUMA node it is on
        for touched in {numa, *m.decode_shares(action.measured)}:
            self.actions.acted((action.node, touched), at)
        if action.kind == "freeze":
            cpu = action.measured.get(m.POD_CPU)
            self._set_frozen(FrozenPod(action.node, action.pod, numa, at, action.measured[m.LOAD], cpu,
                                       tuple(sorted(m.decode_shares(action.measured).items())), action.action_id))
        elif action.kind == "set-cpuset":
            target = int(action.measured[m.TARGET_NUMA])
            self.actions.acted((action.node, target), at)
            self.moved[key] = MovedPod(action.node, action.pod, m.decode_cpus(action.measured), numa, target, at,
                                       action.action_id)
        return f"{action.kind} of {action.pod} on {action.node} NUMA {numa} pending"

    def record_result(self, result: ActionResult) -> str:
        """Apply what became of an action; what it did."""
        pending = self.actions.answered(result)
        if pending is None:
            return f"ignored: {result.action_id} is not a pending remediation action"
        action = pending.action
        key = (action.node, action.pod)
        if result.status == "unknown-pod":
            self._forget(*key)
            return f"{action.pod} unknown on {action.node}: forgotten"
        frozen, moved = self.frozen.get(key), self.moved.get(key)
        done = result.status == "done"
        if action.kind == "freeze" and frozen is not None and frozen.action_id == action.action_id:
            if done:
                self._set_frozen(replace(frozen, confirmed=True, acted_at=result.acted_at))
            else:
                self._thawed(*key)
        elif action.kind == "thaw" and done:
            self._thawed(*key)
        elif action.kind == "set-cpuset" and moved is not None and moved.action_id == action.action_id:
            if done:
                self.moved[key] = replace(moved, confirmed=True)
            else:
                del self.moved[key]
        outcome = "done" if done else f"{result.status}: {result.reason or 'no reason given'}"
        return f"{action.kind} of {action.pod} on {action.node}: {outcome}"

    def _set_frozen(self, frozen: FrozenPod) -> None:
        self.frozen[(frozen.node, frozen.pod)] = frozen
        self._frozen_on.setdefault(frozen.node, {})[frozen.pod] = frozen

    def _thawed(self, node: str, pod: str) -> None:
        self.frozen.pop((node, pod), None)
        on_node = self._frozen_on.get(node, {})
        on_node.pop(pod, None)
        if not on_node:
            self._frozen_on.pop(node, None)

    def _forget(self, node: str, pod: str) -> None:
        self._thawed(node, pod)
        self.moved.pop((node, pod), None)
        self.actions.forget(node, pod, "unknown-pod")


def rebuild(events: Iterable[object], requested_by: str = "remediation") -> RemediationMemory:
    """The memory after applying, in order, every `NodeAction` requested by
    `requested_by` and every `ActionResult` of `events` (other payloads
    are skipped): the same state a live service reached from them."""
    memory = RemediationMemory()
    for event in events:
        if isinstance(event, NodeAction) and event.requested_by == requested_by:
            memory.record_action(event)
        elif isinstance(event, ActionResult):
            memory.record_result(event)
    return memory
