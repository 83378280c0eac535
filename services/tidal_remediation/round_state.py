"""The scratch state of one remediation round, shared by its steps (the
analogue of the kube-scheduler's CycleState): computed once from the
snapshot and the memory, updated as actions are planned."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from .memory import RemediationMemory
from .policy_settings import PolicySettings
from .state import NodeState, PodState

PlannedKind = Literal["freeze", "thaw", "set-cpuset"]


@dataclass(frozen=True)
class PlannedAction:
    """One decision: the pod, the NUMA node it answers, why, and the loads
    (measured at round start, projected before and after this action)."""

    kind: PlannedKind
    pod: str
    numa: int
    reason: str
    measured_load: float
    load_before: float
    projected_load: float
    threshold: float
    pod_cpu_milli: float | None
    shares: Mapping[int, float]
    dry_run: bool = False
    cpu_count: int = 0  # a move: the exclusive CPUs the pod holds (0: a shared pod)
    from_cpuset: tuple[int, ...] = ()
    target_numa: int | None = None
    target_load: float | None = None
    target_projected: float | None = None


class RoundState:
    """The per-round scratch state the three steps share (read-once inputs,
    projected loads, CPUs taken, CPUs promised to moves per NUMA node, pods
    already acted on, actions, notes)."""

    def __init__(self, state: NodeState, memory: RemediationMemory, settings: PolicySettings, now: datetime):
        self.state, self.memory, self.settings, self.now = state, memory, settings, now
        self.measured = {n.id: n.load for n in state.numa.values() if n.load is not None}
        self.loads = dict(self.measured)
        pending = memory.pending_on(state.node)
        self.taken = set(state.reserved_cpus) | {c for p in state.pods if p.exclusive for c in p.cpuset}
        # CPUs a move still in flight will take on its target are not in the metrics yet
        self.promised: dict[int, int] = {}
        for p in pending:
            if p.action.kind == "set-cpuset" and p.action.target_numa is not None:
                self.promised[p.action.target_numa] = self.promised.get(p.action.target_numa, 0) + \
                    p.action.cpu_count
        self.busy = {p.action.pod for p in pending}
        self.actions: list[PlannedAction] = []
        self.notes: list[str] = []
        self.cooling = {n for n in state.numa if self._cooling_for(n) is not None}

    def _cooling_for(self, numa: int) -> float | None:
        last = self.memory.last_action_at(self.state.node, numa)
        if last is None:
            return None
        age = (self.now - last).total_seconds()
        return age if age < self.settings.cool_down_s else None

    def check_cool(self, numa: int) -> bool:
        """Whether `numa` is past its cool-down; notes it when not."""
        age = self._cooling_for(numa)
        if age is not None:
            self.notes.append(f"NUMA {numa}: cool-down, last action {age:.0f}s ago < {self.settings.cool_down_s:g}s")
        return age is None

    def room(self) -> bool:
        """Whether the round may plan one more action; notes it when not."""
        if len(self.actions) < self.settings.max_actions_per_round:
            return True
        note = f"max actions per round ({self.settings.max_actions_per_round}) reached"
        if note not in self.notes:
            self.notes.append(note)
        return False

    def frozen(self, pod: PodState) -> bool:
        """Whether `pod` counts as frozen (agent's word, or a believable record)."""
        if pod.frozen:
            return True
        record = self.memory.frozen.get((self.state.node, pod.name))
        # a confirmed freeze of a pod measured using CPU over a window wholly after
        # the freeze (thawed by hand, restarted) is stale: believing it would move
        # LS pods needlessly; a sample whose window began before it (one delivered
        # late, across a broker failover) still shows the CPU of before
        return record is not None and not (record.confirmed and pod.cpu_milli > 0 and self._after(record.acted_at))

    def _after(self, acted_at: datetime | None) -> bool:
        """Whether this round's sample was measured wholly after `acted_at` (unknown: taken as after)."""
        since = self.state.sampled_since
        return acted_at is None or since is None or since >= acted_at

    def shift(self, shares: Mapping[int, float], sign: int) -> None:
        """load'(m) = max(load(m) ± share(m) / capacity(m), 0) for each m."""
        for numa, milli in shares.items():
            if numa in self.loads:
                self.loads[numa] = max(self.loads[numa] + sign * milli / self.state.numa[numa].capacity_milli, 0.0)

    def add(self, kind: PlannedKind, pod: str, numa: int, reason: str, before: float, threshold: float,
            cpu: float | None, shares: Mapping[int, float], **move: object) -> None:
        """Plan an action; call after `shift`, so its projected load is the new one."""
        self.busy.add(pod)
        self.actions.append(PlannedAction(kind, pod, numa, reason, self.measured[numa], before, self.loads[numa],
                                          threshold, cpu, dict(shares), kind in self.settings.dry_run, **move))
