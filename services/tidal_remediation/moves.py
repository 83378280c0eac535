"""Where a latency-sensitive pod goes when it is moved off a hot NUMA node
(SPEC §E hotspot step 2). Which CPUs it gets there is the node agent's
choice, the one authority over the node's CPU sets (kubelet's packed
allocator on its own books); remediation asks for a NUMA node and a count.

Moving a pod with usage u and k CPUs from source s to target t projects

    load'(s) = load(s) − u / capacity(s)
    load'(t) = load(t) + u / capacity(t)

and t is eligible when

    - t has a load figure and is not cooling down (its load is measured,
      and not still settling from an earlier action),
    - t has at least k free CPUs — CPUs that are neither reserved nor in
      another pod's exclusive cpuset, nor promised to a move onto t still
      in flight — so the pod keeps as many CPUs as it had and is never
      squeezed beyond what t can give (a pre-check: the agent refuses,
      with its reason, what its books cannot honour),
    - load(t) < load(s): never onto a NUMA node busier than the source
      (SPEC §E, loads as they stand in this round, earlier moves included),
    - load'(t) < load(s): the move lowers the hotter of the two, so the
      hotspot is relieved, not relocated. (Requiring load'(t) ≤ load'(s)
      would refuse good moves, e.g. 1.0 → 0.5 + 0.6; allowing any target
      below the source would let a pod that alone saturates a NUMA node
      bounce between nodes.) When no NUMA node passes, the loads are as
      balanced as moving this pod can make them.

The eligible target with the lowest load'(t) wins (ties: lower id).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from .state import NodeState, PodState


@dataclass(frozen=True)
class MoveTarget:
    """The chosen NUMA node and the loads."""

    numa: int
    source_after: float
    target_before: float
    target_after: float


def free_cpus(state: NodeState, numa: int, taken: Collection[int]) -> list[int]:
    """CPUs of `numa` that are in neither `taken` (reserved and exclusive
    CPUs) nor the node's reserved set, ascending."""
    return [cpu for cpu in state.numa[numa].cpus if cpu not in taken and cpu not in state.reserved_cpus]


def choose_target(pod: PodState, source: int, loads: Mapping[int, float], state: NodeState,
                  taken: Collection[int], cooling: Collection[int],
                  promised: Mapping[int, int] | None = None) -> tuple[MoveTarget | None, list[str]]:
    """The best eligible target for moving `pod` off `source` (see the
    module docstring), or None; and why each other NUMA node was not taken.
    `loads` are the round's projected loads; `cooling` the NUMA nodes still
    in their cool-down; `promised` the CPUs per NUMA node that moves in
    flight will take."""
    need = len(pod.cpuset)
    source_after = max(loads[source] - pod.cpu_milli / state.numa[source].capacity_milli, 0.0)
    eligible: list[MoveTarget] = []
    rejected: list[str] = []
    for numa in sorted(state.numa):
        if numa == source:
            continue
        if numa not in loads:
            rejected.append(f"NUMA {numa}: no load figure")
            continue
        if numa in cooling:
            rejected.append(f"NUMA {numa}: cooling down")
            continue
        free = len(free_cpus(state, numa, taken)) - (promised or {}).get(numa, 0)
        if free < need:
            rejected.append(f"NUMA {numa}: {max(free, 0)} free CPU(s) < {need} needed")
            continue
        after = loads[numa] + pod.cpu_milli / state.numa[numa].capacity_milli
        if loads[numa] >= loads[source]:
            rejected.append(f"NUMA {numa}: load {loads[numa]:.3f} is not below the source's {loads[source]:.3f}")
            continue
        if after >= loads[source]:
            rejected.append(f"NUMA {numa}: would be at {after:.3f}, not below the source's {loads[source]:.3f}")
            continue
        eligible.append(MoveTarget(numa, source_after, loads[numa], after))
    best = min(eligible, key=lambda t: (t.target_after, t.numa), default=None)
    return best, rejected
