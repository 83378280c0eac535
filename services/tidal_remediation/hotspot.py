"""Which NUMA nodes of a node are hot, and which are cool enough to thaw
(SPEC §E, seed 004 "node adjustment module").

    hot(m)  ⇔ load(m) > high          (default 0.80)
    cold(m) ⇔ load(m) < low           (default 0.60)

A NUMA node whose load was not sampled is neither: unknown is not idle,
and not hot either. The excess is the CPU the node must shed to stop being
hot, excess(m) = (load(m) − high) · capacity(m) in milli-CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from .policy_settings import DEFAULT_HIGH, DEFAULT_LOW
from .state import NodeState


@dataclass(frozen=True)
class Hotspot:
    """A NUMA node above the high threshold, and by how much."""

    numa: int
    load: float
    threshold: float
    excess_milli: float
    reason: str


def find_hotspots(state: NodeState, high: float = DEFAULT_HIGH) -> list[Hotspot]:
    """The NUMA nodes with load > high, hottest first (ties: lower id),
    each with excess = (load − high) · capacity milli-CPU."""
    hot = []
    for numa in state.numa.values():
        if numa.load is None or numa.load <= high:
            continue
        excess = (numa.load - high) * numa.capacity_milli
        hot.append(Hotspot(numa.id, numa.load, high, excess,
                           f"NUMA {numa.id} load {numa.load:.3f} > high threshold {high:.3f} "
                           f"({excess:.0f} milli-CPU over)"))
    return sorted(hot, key=lambda h: (-h.load, h.numa))


def find_cold(state: NodeState, low: float = DEFAULT_LOW) -> list[int]:
    """The NUMA nodes with load < low, coolest first (ties: lower id)."""
    cold = [n for n in state.numa.values() if n.load is not None and n.load < low]
    return [n.id for n in sorted(cold, key=lambda n: (n.load, n.id))]


def unsampled(state: NodeState) -> list[int]:
    """The NUMA nodes without a load figure (left alone this round)."""
    return sorted(n.id for n in state.numa.values() if n.load is None)
