"""What a joint window's trial holds on the scheduler cache (`gpu_joint`):
pods taken through the cache's `assume` — the check every decision passes
— with the fragmentation they add, measured, then undone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .cluster_state import ClusterState
from .gpu_frag import FragModel
from .pod_request import PodRequest, Placement


@dataclass(frozen=True)
class Trial:
    """One order tried: what it placed (window index → placement) and its figures."""

    order: tuple[int, ...]
    placed: dict[int, Placement]
    gpu_milli: int
    frag_added: float

    def key(self, required: frozenset[int]) -> tuple:
        """Lower is better (`gpu_joint`'s docstring); `required`: the pods the queue order placed."""
        return (not required <= self.placed.keys(), -self.gpu_milli, round(self.frag_added, 6))


class Taken:
    """Window pods held on the cache during a trial, with the fragmentation
    of every row they touched before the window (to measure what it added)."""

    def __init__(self, state: ClusterState, requests: Sequence[PodRequest], frag: FragModel) -> None:
        self.state, self.requests, self.frag = state, requests, frag
        self.models = tuple(state.models)
        self.before: dict[int, float] = {}
        self.placed: dict[int, Placement] = {}

    def take(self, i: int, placement: Placement) -> bool:
        if not placement.ok or placement.allocation is None:
            return False
        row = self.state.rows[placement.allocation.node]
        if row not in self.before:
            self.before[row] = self.frag_at(row)
        if not self.state.assume(self.requests[i].key, placement.allocation).ok:
            return False
        self.placed[i] = placement
        return True

    def drop(self, i: int) -> Placement:
        self.state.release(self.requests[i].key)
        return self.placed.pop(i)

    def frag_at(self, row: int) -> float:
        s = slice(row, row + 1)
        return float(self.frag.node_frag(self.state.cpu_free[s], self.state.gpu_free[s], self.state.gpu_model[s],
                                         self.models)[0])

    def added(self) -> float:
        return sum(self.frag_at(row) - f for row, f in self.before.items())

    def trial(self, order: tuple[int, ...]) -> Trial:
        # the placed pods first: taken together they fit, whatever comes after them
        first = tuple(i for i in order if i in self.placed) + tuple(i for i in order if i not in self.placed)
        gpu = sum(self.requests[i].gpu_count * self.requests[i].gpu_milli for i in self.placed)
        return Trial(first, dict(self.placed), gpu, self.added())

    def undo(self) -> None:
        for i in list(self.placed):
            self.drop(i)


def measure(state: ClusterState, requests: Sequence[PodRequest], order: tuple[int, ...],
            placed: dict[int, Placement], frag: FragModel) -> Trial | None:
    """Another solver's answer (window index → placement) as a trial, taken
    in `order` through the cache's `assume` as every trial is, then undone;
    None when the cache refuses any of it (never compared, so never published)."""
    taken = Taken(state, requests, frag)
    try:
        for i in order:
            if i in placed and not taken.take(i, placed[i]):
                return None
        return taken.trial(order)
    finally:
        taken.undo()
