"""One remediation round for one node: what to freeze, move and thaw
(SPEC §E hotspot remediation, seed 004 steps (1)–(3)).

The round works on projected loads, starting from the measured ones and
re-estimated after every planned action:

    freeze / move off m:   load'(m) = max(load(m) − share(m) / capacity(m), 0)
    thaw / move onto m:    load'(m) = load(m) + share(m) / capacity(m)

with share(m) the pod's usage attributed to m (`state.numa_shares`; for a
thaw, the usage it had when frozen). Hot NUMA nodes are handled hottest
first, then cold ones coolest first:

1. hot (load > high): freeze BE pods on it, highest share first (ties:
   higher total usage, then name), until load' ≤ high. Pods using no CPU
   there are skipped: freezing them frees nothing.
2. still hot, and at the start of the round no BE pod there was left to
   freeze and no freeze there awaited its result: move LS pods that run
   only on it, lowest usage first, to the target of `moves.choose_target`,
   until load' ≤ high or no target is eligible (balanced). A move needs a
   *measured* load: the freezes' effect must have been seen (the cool-down
   gives the agent time to report it), not just projected.
3. cold (load < low): thaw frozen pods on it, see `thaw.py`.

Guard rails: a latency-sensitive pod is never frozen; a pod with an
unanswered action is left alone, and CPUs an unanswered move will take on
its target are not free; which CPUs a moved pod gets is the node agent's
choice (remediation names the NUMA node and the count); no action on a NUMA node whose last action is younger than
the cool-down (a move's target included) — within one round actions chain
on projected loads, the cool-down separates rounds so that each starts
from a measurement that shows the previous round's effect; at most
`max_actions_per_round`; an action whose kind is in `dry_run` is marked so
(the service publishes it for visibility and does not record it). A pod is
frozen if the agent says so or the memory does — except a confirmed freeze
of a pod measured using CPU again (thawed by hand, restarted), which is
frozen anew rather than believed. Everything not done is said in `notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .hotspot import find_cold, find_hotspots
from .memory import RemediationMemory
from .moves import choose_target
from .policy_settings import PolicySettings
from .round_state import PlannedAction, PlannedKind, RoundState
from .state import NodeState, numa_shares
from .thaw import thaw_step

__all__ = ["PlannedAction", "PlannedKind", "RoundPlan", "plan_round"]


@dataclass(frozen=True)
class RoundPlan:
    """The ordered actions of one round, what was left undone and why, and
    the NUMA loads measured and projected after the actions."""

    node: str
    at: datetime
    actions: list[PlannedAction]
    notes: list[str] = field(default_factory=list)
    measured: dict[int, float] = field(default_factory=dict)
    projected: dict[int, float] = field(default_factory=dict)


def _freeze(r: RoundState, numa: int) -> bool:
    """Step 1; whether any BE pod on `numa` was left to freeze."""
    high, cap = r.settings.high_threshold, r.state.numa[numa].capacity_milli
    candidates = []
    for pod in r.state.pods:
        shares = numa_shares(pod, r.state)
        if pod.qos == "BE" and shares.get(numa, 0) > 0 and not r.frozen(pod) and pod.name not in r.busy:
            candidates.append((pod, shares))
    candidates.sort(key=lambda c: (-c[1][numa], -c[0].cpu_milli, c[0].name))
    for pod, shares in candidates:
        if r.loads[numa] <= high or not r.room():
            break
        before = r.loads[numa]
        r.shift(shares, -1)
        r.add("freeze", pod.name, numa,
              f"NUMA {numa} load {before:.3f} > high {high:.3f}: freeze BE pod {pod.name}, highest usage first "
              f"({shares[numa]:.0f} of its {pod.cpu_milli:.0f} milli-CPU on NUMA {numa}); projected "
              f"{before:.3f} - {shares[numa]:.0f}/{cap:.0f} = {r.loads[numa]:.3f}", before, high, pod.cpu_milli, shares)
    return bool(candidates)


def _move(r: RoundState, numa: int) -> None:
    """Step 2: move LS pods that run only on `numa`, lowest usage first."""
    high, node = r.settings.high_threshold, r.state.node
    waiting = [p.action.pod for p in r.memory.pending_on(node) if p.action.kind == "freeze"
               and r.memory.is_frozen(node, p.action.pod)
               and numa in dict(r.memory.frozen[(node, p.action.pod)].shares)]
    if waiting:
        r.notes.append(f"NUMA {numa}: still hot, waiting for the result of freezing {', '.join(sorted(waiting))} "
                       f"before moving latency-sensitive pods")
        return
    movable = sorted((p for p in r.state.pods if p.qos == "LS" and p.numa_nodes == (numa,) and p.cpu_milli > 0
                      and not r.frozen(p) and p.name not in r.busy), key=lambda p: (p.cpu_milli, p.name))
    if not movable:
        r.notes.append(f"NUMA {numa}: still hot at {r.loads[numa]:.3f} with every BE pod frozen, "
                       f"and no latency-sensitive pod runs only here")
    for pod in movable:
        if r.loads[numa] <= high or not r.room():
            return
        if not pod.cpuset:
            r.notes.append(f"{pod.name}: no cpuset reported, its CPU count is unknown: not moved")
            continue
        target, rejected = choose_target(pod, numa, r.loads, r.state, r.taken, r.cooling, r.promised)
        if target is None:
            r.notes.append(f"{pod.name}: not moved off NUMA {numa} ({'; '.join(rejected) or 'no other NUMA node'})")
            continue
        before = r.loads[numa]
        r.shift({numa: pod.cpu_milli}, -1)
        r.shift({target.numa: pod.cpu_milli}, +1)
        count = len(pod.cpuset) if pod.exclusive else 0  # the agent re-takes as many on the target
        if pod.exclusive:
            r.taken -= set(pod.cpuset) - r.state.reserved_cpus
        r.promised[target.numa] = r.promised.get(target.numa, 0) + count
        r.add("set-cpuset", pod.name, numa,
              f"NUMA {numa} load {before:.3f} > high {high:.3f} with every BE pod frozen: move LS pod {pod.name}, "
              f"lowest usage first ({pod.cpu_milli:.0f} milli-CPU), to NUMA {target.numa} "
              f"(its load {target.target_before:.3f} < source {before:.3f}; projected {target.target_after:.3f}, "
              f"source {target.source_after:.3f})",
              before, high, pod.cpu_milli, {numa: pod.cpu_milli}, cpu_count=count, from_cpuset=pod.cpuset,
              target_numa=target.numa, target_load=target.target_before, target_projected=target.target_after)


def plan_round(state: NodeState, memory: RemediationMemory, settings: PolicySettings, now: datetime) -> RoundPlan:
    """The actions of one round on one node, in order, with reasons and
    loads (see the module docstring for the rules). Pure: `memory` is only
    read."""
    r = RoundState(state, memory, settings, now)
    if not settings.enabled:
        return RoundPlan(state.node, now, [], ["remediation disabled"], dict(r.measured), dict(r.loads))
    for hot in find_hotspots(state, settings.high_threshold):
        if not r.check_cool(hot.numa):
            continue
        left_to_freeze = _freeze(r, hot.numa)
        if r.loads[hot.numa] > settings.high_threshold and not left_to_freeze:
            _move(r, hot.numa)
    for cold in find_cold(state, settings.low_threshold):
        thaw_step(r, cold)
    return RoundPlan(state.node, now, r.actions, r.notes, dict(r.measured), dict(r.loads))
