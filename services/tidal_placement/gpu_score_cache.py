"""Scores of a row-local GPU strategy, remembered per (pod shape, node
state) — the same decisions as the strategy itself, computed only for node
states not scored before.

A strategy is row-local when a candidate's cost, device and tiebreaks
depend only on the candidate's own figures (free CPU, free milli-GPU and
health per device, idle GPU — which counts shared physical GPUs once —
and GPU model) and the pod's shape — true of `fgd` and
`fgd-cpu`. Nodes in the same figures are in the same *state* and score
the same, so:

- every row carries the id of its state; a row whose `ClusterState.version`
  moved since is looked up again (one decision moves one row);
- a shape's scores are kept per state id: a pod pays only for states the
  cache has not scored for its shape yet — after a decision, the one state
  the chosen node moved to, if no node was in it before. A cluster of
  thousands of nodes is in far fewer states (the bench's 5,000 nodes in
  65 at the start and about 1,250 after 20,000 pods).

The scores come from the wrapped strategy's own `score`, run on the
states' figures (`NodeStates` reads like a `ClusterState`), and a row's
score depends on its own figures only, so decisions are the same as the
strategy's alone (`tests/test_placement_score_cache.py` replays openb
pods through both). Not cached: candidates with their own per-device
eligibility (a GPU kind, a §B group, a mixed-model node).
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import numpy as np

from .cluster_state import ClusterState
from .gpu_candidates import Candidates, GpuStrategy, Scored, StateScores
from .gpu_workload import Shape
from .node_states import NodeStates
from .ranking import pack_keys

MAX_SHAPES = 256  # shapes remembered, least recently used dropped first
MAX_STATES = 1 << 17  # states remembered before starting afresh, at most
# A cluster is in at most one state per row at a time: the rest are states
# its rows have left. Starting afresh past a few per row costs each shape one
# scoring of the current states, and keeps the per-shape arrays small.
STATES_PER_ROW, MIN_STATES = 3, 4096
# New states scored by the strategy's `score_few` (plain Python, per state)
# when it has one, up to this many; past it, its vectorised `score`. (48 was
# 1-2 % faster on the bench's 56 pod shapes, within the noise of
# bench/policy_ab.py, and 4-8 % slower with 2,729 shapes, where a shape finds
# many states new and the plain scoring's memos hit less.)
FEW_STATES = 16


class _Entry:
    """One shape's scores per state id (cost NaN: not scored yet), and, from
    the shape's second pod on, its keys packed (`ranking.pack_keys`; −1: not
    scored yet) while every key scored so far packs. Not from the first:
    with more shapes than the cache keeps (bench/placement_policy.py
    --cpu-values 296: 2,729), most entries serve a pod or two before they
    are dropped, and packing the thousands of states a new entry scores
    would be work for nothing."""

    def __init__(self) -> None:
        self.cost = np.full(0, np.nan)
        self.device: np.ndarray | None = None
        self.tiebreaks: list[np.ndarray] = []
        self.packed: np.ndarray | None = None
        self.packable = True  # False once some key did not pack: the entry ranks by its keys themselves

    def pack(self) -> None:
        """Pack the keys of every state scored so far, if they pack."""
        scored = (~np.isnan(self.cost)).nonzero()[0]
        packed = pack_keys([self.cost[scored], *(t[scored] for t in self.tiebreaks)])
        if packed is None:
            self.packable = False
            return
        self.packed = np.full(len(self.cost), -1, dtype=np.int64)
        self.packed[scored] = packed

    def grow(self, states: int) -> None:
        if len(self.cost) >= states:
            return
        size = max(states, 2 * len(self.cost), 1024)
        extra = size - len(self.cost)
        self.cost = np.concatenate([self.cost, np.full(extra, np.nan)])
        if self.packed is not None:
            self.packed = np.concatenate([self.packed, np.full(extra, -1, dtype=np.int64)])
        if self.device is not None:
            self.device = np.concatenate([self.device, np.zeros(extra, dtype=np.int64)])
        self.tiebreaks = [np.concatenate([t, np.zeros(extra)]) for t in self.tiebreaks]

    def store(self, sids: np.ndarray, scored: Scored) -> None:
        if scored.device is not None and self.device is None:
            self.device = np.zeros(len(self.cost), dtype=np.int64)
        if len(self.tiebreaks) != len(scored.tiebreaks) and not np.isnan(self.cost).all():
            self.packed, self.packable = None, False  # keys of another length than those scored before
        while len(self.tiebreaks) < len(scored.tiebreaks):
            self.tiebreaks.append(np.zeros(len(self.cost)))
        if scored.device is not None:
            self.device[sids] = scored.device
        for mine, theirs in zip(self.tiebreaks, scored.tiebreaks):
            mine[sids] = theirs
        self.cost[sids] = scored.cost
        if self.packed is not None:
            packed = pack_keys([scored.cost, *scored.tiebreaks])
            if packed is None:
                self.packed, self.packable = None, False
            else:
                self.packed[sids] = packed


class ScoreCache:
    """A row-local strategy's scores per shape and node state; `inner` is
    the strategy (and the reference)."""

    def __init__(self, inner: GpuStrategy, max_shapes: int = MAX_SHAPES, max_states: int = MAX_STATES):
        self.inner, self.max_shapes, self.max_states = inner, max_shapes, max_states
        self.name, self.scores_cpu_pods = inner.name, inner.scores_cpu_pods
        self._score_few = getattr(inner, "score_few", None)  # optional: see gpu_candidates.GpuStrategy
        self._states: NodeStates | None = None
        self._entries: OrderedDict[Shape, _Entry] = OrderedDict()

    def succeed(self, previous: GpuStrategy) -> None:
        """Start from the node states `previous` (a strategy this one
        replaces) knows, when it is a score cache too: a new target workload
        changes every score, not which nodes are alike, and telling the
        nodes apart again costs a pass over every row. The states no node is
        in are forgotten: every shape's scores are as long as the states known."""
        if isinstance(previous, ScoreCache) and previous._states is not None:
            self._states = previous._states.compacted()

    def score(self, c: Candidates, shape: Shape) -> Scored:
        """The inner strategy's scores for `c`, computed only for new states."""
        by_state = self.score_states(c, shape)
        return self.inner.score(c, shape) if by_state is None else by_state.rows()

    def score_states(self, c: Candidates, shape: Shape) -> StateScores | None:
        """`score` given per node state (None: candidates with their own
        per-device eligibility, which only `score` answers)."""
        if c.own_eligible:
            return None
        states = self._current(c.state)
        entry = self._entry(shape, len(states))
        sids = states.row_state.take(c.rows)
        by_state = self._packed(entry, states, sids, shape) if entry.packed is not None else None
        if by_state is not None:
            return by_state
        present = StateScores(sids, entry.cost).states()
        cost = entry.cost[present]
        if np.isnan(np.add.reduce(cost)):  # some state not scored for this shape yet
            self._store(entry, states, present[np.isnan(cost)], shape)
        return StateScores(sids, entry.cost, entry.device, tuple(entry.tiebreaks), present)

    def _packed(self, entry: _Entry, states: NodeStates, sids: np.ndarray, shape: Shape) -> StateScores | None:
        # the candidates' scores with their keys packed, the states not scored yet (packed as
        # -1) scored first; None when their keys did not pack (the entry packs no more)
        packed = entry.packed.take(sids)
        unscored = (packed < 0).nonzero()[0]  # most decisions meet some: no separate test first
        if len(unscored):
            new = sids[unscored]  # their states, distinct and ascending (a few in plain Python)
            self._store(entry, states, np.array(sorted(set(new.tolist()))) if len(new) <= FEW_STATES
                        else StateScores(new, entry.cost).states(), shape)
            if entry.packed is None:
                return None
            packed[unscored] = entry.packed[new]
        return StateScores(sids, entry.cost, entry.device, tuple(entry.tiebreaks), packed=packed)

    def _store(self, entry: _Entry, states: NodeStates, new: np.ndarray, shape: Shape) -> None:
        # score states `new` for `shape`: a few in plain Python when the strategy can
        fresh = Candidates(states, new)  # type: ignore[arg-type]
        scored = self._score_few(fresh, shape) if self._score_few and len(new) <= FEW_STATES else None
        entry.store(new, scored if scored is not None else self.inner.score(fresh, shape))

    def memory(self) -> tuple[int, int]:
        """(states remembered, bytes of their arrays, of their figures kept
        as Python values and derived by the strategy, and of every shape's
        scores)."""
        states = self._states
        if states is None:
            return 0, 0
        arrays = [getattr(states, name) for name in states.FIGURES]
        for entry in self._entries.values():
            arrays += [entry.cost, *entry.tiebreaks] + [a for a in (entry.device, entry.packed) if a is not None]
        plain = sum(sys.getsizeof(row) + sys.getsizeof(row[0]) + sys.getsizeof(row[1]) for row in states.plain)
        derived = sum(getattr(kept, "nbytes", 0) for kept in states.derived.values())
        return len(states), sum(a.nbytes for a in arrays) + plain + derived

    def _current(self, cluster: ClusterState) -> NodeStates:
        states = self._states
        limit = min(self.max_states, max(MIN_STATES, STATES_PER_ROW * cluster.size))
        if states is None or states.cluster is not cluster or states.gpu_cols != cluster.gpu_cols \
                or len(states) > limit:
            states = self._states = NodeStates(cluster)  # a new cache, wider devices or too many states
            self._entries.clear()
        states.refresh()
        return states

    def _entry(self, shape: Shape, states: int) -> _Entry:
        entry = self._entries.get(shape)
        if entry is None:
            entry = self._entries[shape] = _Entry()
            if len(self._entries) > self.max_shapes:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(shape)
            if entry.packed is None and entry.packable:  # the shape's second pod on: see _Entry
                entry.pack()
        entry.grow(states)
        return entry
