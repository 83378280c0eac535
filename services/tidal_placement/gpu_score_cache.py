"""Scores of a row-local GPU strategy, remembered per (pod shape, node row)
and recomputed only for the rows that changed since.

A strategy is row-local when a candidate's cost, device and tiebreaks
depend only on that candidate's own row (free CPU, free milli-GPU per
device, healthy devices, GPU model) and the pod's shape — true of `fgd`
and `fgd-cpu`. Every change to a row's figures gives it a new
`ClusterState.version`, so a score computed at version v is still the
score while the row stays at v. A decision touches one row; the next pod
of a shape pays for the rows changed since that shape was last scored,
not for every node, and the scores come from the very same `score`
function (the wrapped strategy is the reference), so decisions are the
same as without the cache.

Not cached (passed through): candidates with their own per-device
eligibility (a GPU kind, a §B group, a mixed-model node), whose scores
depend on more than the row.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from .cluster_state import ClusterState
from .gpu_candidates import Candidates, GpuStrategy, Scored
from .gpu_workload import Shape

MAX_SHAPES = 512  # shapes remembered (least recently used dropped): ~40 bytes per node each


@dataclass
class _Entry:
    """One shape's scores, per row: the version they were computed at."""

    seen: np.ndarray
    cost: np.ndarray
    device: np.ndarray | None = None
    tiebreaks: list[np.ndarray] = field(default_factory=list)

    def grow(self, capacity: int) -> None:
        if len(self.seen) >= capacity:
            return
        extra = capacity - len(self.seen)
        self.seen = np.concatenate([self.seen, np.full(extra, -1, dtype=np.int64)])
        self.cost = np.concatenate([self.cost, np.zeros(extra)])
        if self.device is not None:
            self.device = np.concatenate([self.device, np.zeros(extra, dtype=np.int64)])
        self.tiebreaks = [np.concatenate([t, np.zeros(extra)]) for t in self.tiebreaks]

    def store(self, rows: np.ndarray, scored: Scored, versions: np.ndarray) -> None:
        if scored.device is not None and self.device is None:
            self.device = np.zeros(len(self.seen), dtype=np.int64)
        while len(self.tiebreaks) < len(scored.tiebreaks):
            self.tiebreaks.append(np.zeros(len(self.seen)))
        self.cost[rows] = scored.cost
        if scored.device is not None:
            self.device[rows] = scored.device
        for mine, theirs in zip(self.tiebreaks, scored.tiebreaks):
            mine[rows] = theirs
        self.seen[rows] = versions


class ScoreCache:
    """A row-local strategy's scores, per shape and row, kept current by
    row versions; `inner` is the strategy (and the reference)."""

    def __init__(self, inner: GpuStrategy, max_shapes: int = MAX_SHAPES):
        self.inner, self.max_shapes = inner, max_shapes
        self.name, self.scores_cpu_pods = inner.name, inner.scores_cpu_pods
        self._state: ClusterState | None = None
        self._entries: OrderedDict[Shape, _Entry] = OrderedDict()

    def score(self, c: Candidates, shape: Shape) -> Scored:
        """The inner strategy's scores for `c`, computed only where stale."""
        state = c.state
        if c.own_eligible or state is None:
            return self.inner.score(c, shape)
        entry = self._entry(state, shape)
        rows = c.rows
        versions = state.version[rows]
        stale = np.flatnonzero(entry.seen[rows] != versions)
        if stale.size:
            entry.store(rows[stale], self.inner.score(Candidates(state, rows[stale]), shape), versions[stale])
        return Scored(cost=entry.cost[rows], device=None if entry.device is None else entry.device[rows],
                      tiebreaks=tuple(t[rows] for t in entry.tiebreaks))

    def _entry(self, state: ClusterState, shape: Shape) -> _Entry:
        if state is not self._state:  # another cache: nothing remembered applies
            self._state = state
            self._entries.clear()
        entry = self._entries.get(shape)
        if entry is None:
            entry = _Entry(seen=np.full(state.capacity, -1, dtype=np.int64), cost=np.zeros(state.capacity))
            self._entries[shape] = entry
            if len(self._entries) > self.max_shapes:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(shape)
            entry.grow(state.capacity)
        return entry
