"""Where a latency-sensitive pod goes when it is moved off a hot NUMA node,
and on which CPUs (SPEC §E hotspot step 2).

Moving a pod with usage u and k CPUs from source s to target t projects

    load'(s) = load(s) − u / capacity(s)
    load'(t) = load(t) + u / capacity(t)

and t is eligible when

    - t has a load figure and is not cooling down (its load is measured,
      and not still settling from an earlier action),
    - t has at least k free CPUs — CPUs that are neither reserved nor in
      another pod's exclusive cpuset — so the pod keeps as many CPUs as it
      had and is never squeezed beyond what t can give,
    - load(t) < load(s): never onto a NUMA node busier than the source
      (SPEC §E, loads as they stand in this round, earlier moves included),
    - load'(t) < load(s): the move lowers the hotter of the two, so the
      hotspot is relieved, not relocated. (Requiring load'(t) ≤ load'(s)
      would refuse good moves, e.g. 1.0 → 0.5 + 0.6; allowing any target
      below the source would let a pod that alone saturates a NUMA node
      bounce between nodes.) When no NUMA node passes, the loads are as
      balanced as moving this pod can make them.

The eligible target with the lowest load'(t) wins (ties: lower id).

The new cpuset takes k of t's free CPUs: whole free physical cores first
(lowest core first) while k is at least a core's size, so the
latency-sensitive pod does not share a core's execution units with a
stranger; then single threads from the cores with the fewest free threads
(filling partly used cores before breaking whole ones, as the kubelet's
packed allocator does), ties to the lower core and CPU id.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from .state import NodeState, PodState


@dataclass(frozen=True)
class MoveTarget:
    """The chosen NUMA node, the CPUs the pod gets there, and the loads."""

    numa: int
    cpuset: tuple[int, ...]
    source_after: float
    target_before: float
    target_after: float


def free_cpus(state: NodeState, numa: int, taken: Collection[int]) -> list[int]:
    """CPUs of `numa` that are in neither `taken` (reserved and exclusive
    CPUs) nor the node's reserved set, ascending."""
    return [cpu for cpu in state.numa[numa].cpus if cpu not in taken and cpu not in state.reserved_cpus]


def pick_cpus(free: list[int], need: int, cpu_core: Mapping[int, int], numa_cpus: Collection[int]) -> tuple[int, ...]:
    """`need` CPUs of `free`: whole free cores first (lowest core), then
    threads from the cores with the fewest free threads (ties: lower core,
    lower CPU). A CPU with no core in `cpu_core` is its own core.
    Returns () when `free` has fewer than `need` CPUs."""
    if need > len(free):
        return ()

    def core(cpu: int) -> tuple[int, int]:
        return (0, cpu_core[cpu]) if cpu in cpu_core else (1, cpu)

    size: dict[tuple[int, int], int] = {}
    for cpu in numa_cpus:
        size[core(cpu)] = size.get(core(cpu), 0) + 1
    by_core: dict[tuple[int, int], list[int]] = {}
    for cpu in sorted(free):
        by_core.setdefault(core(cpu), []).append(cpu)
    chosen: list[int] = []
    for key in sorted(by_core):
        cpus = by_core[key]
        if len(cpus) == size[key] and need - len(chosen) >= len(cpus):
            chosen.extend(cpus)
    rest = [cpu for cpu in sorted(free) if cpu not in chosen]
    rest.sort(key=lambda cpu: (len(by_core[core(cpu)]), core(cpu), cpu))
    chosen.extend(rest[:need - len(chosen)])
    return tuple(sorted(chosen))


def choose_target(pod: PodState, source: int, loads: Mapping[int, float], state: NodeState,
                  taken: Collection[int], cooling: Collection[int]) -> tuple[MoveTarget | None, list[str]]:
    """The best eligible target for moving `pod` off `source` (see the
    module docstring), or None; and why each other NUMA node was not taken.
    `loads` are the round's projected loads; `cooling` the NUMA nodes still
    in their cool-down."""
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
        free = free_cpus(state, numa, taken)
        if len(free) < need:
            rejected.append(f"NUMA {numa}: {len(free)} free CPU(s) < {need} needed")
            continue
        after = loads[numa] + pod.cpu_milli / state.numa[numa].capacity_milli
        if loads[numa] >= loads[source]:
            rejected.append(f"NUMA {numa}: load {loads[numa]:.3f} is not below the source's {loads[source]:.3f}")
            continue
        if after >= loads[source]:
            rejected.append(f"NUMA {numa}: would be at {after:.3f}, not below the source's {loads[source]:.3f}")
            continue
        cpus = pick_cpus(free, need, state.cpu_core, state.numa[numa].cpus)
        eligible.append(MoveTarget(numa, cpus, source_after, loads[numa], after))
    best = min(eligible, key=lambda t: (t.target_after, t.numa), default=None)
    return best, rejected
