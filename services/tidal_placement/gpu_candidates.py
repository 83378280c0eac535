"""What every GPU strategy scores: the nodes that passed the filters, as
arrays, and the small device-choice rules strategies share.

A strategy is an object with `name`, `scores_cpu_pods` and
`score(candidates, shape) -> Scored`; `cost` is lower-is-better per
candidate, `device` the device a GPU-share pod would take on each
candidate (None: the fullest device that fits, chosen after the node),
`tiebreaks` further keys, compared in order when costs are equal.
A row-local strategy may also have `score_few(candidates, shape) ->
Scored | None`: the same scores for a few candidates, computed faster and
given as lists (they go straight into the score cache's arrays), or None
to leave them to `score` (`gpu_score_cache` asks it for the few node
states it has not scored yet). A cache of a row-local strategy may
answer `score_states(candidates, shape) -> StateScores | None` instead:
the same scores given once per node state, so `decide` ranks the states
among the candidates rather than every candidate.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from .cluster_state import ClusterState
from .gpu_workload import Shape

GPU_MILLI = 1000
EXP_CAP = 709.0


class _read_once:
    """functools.cached_property without its per-access lock (Python 3.11):
    the first read stores the value in the instance, later reads find it there."""

    def __init__(self, read):
        self.read, self.name = read, read.__name__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.read(obj)
        return value


class Candidates:
    """Feasible nodes for one pod, read lazily from the scheduler cache (a
    strategy that needs only node totals never gathers per-device arrays).
    `gpu_free` is (nodes × devices) milli left, `eligible` the devices this
    pod may use, `model` the node GPU model id (−1 = none) into `models`."""

    def __init__(self, state: ClusterState, rows: np.ndarray, eligible: np.ndarray | None = None):
        self.rows, self._state, self._eligible = rows, state, eligible

    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def own_eligible(self) -> bool:
        """Whether the usable devices are this pod's own (not every healthy one)."""
        return self._eligible is not None

    @_read_once
    def cpu_free(self) -> np.ndarray:
        return self._state.cpu_free.take(self.rows)

    @_read_once
    def gpu_idle(self) -> np.ndarray:
        return self._state.gpu_idle.take(self.rows)

    @_read_once
    def gpu_free(self) -> np.ndarray:
        return self._state.gpu_free.take(self.rows, axis=0)

    @_read_once
    def eligible(self) -> np.ndarray:
        source = self._state.gpu_valid if self._eligible is None else self._eligible
        return source.take(self.rows, axis=0)

    @_read_once
    def model(self) -> np.ndarray:
        return self._state.gpu_model.take(self.rows)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self._state.models)

    def plain(self) -> list[PlainRow]:
        """Each candidate's figures as Python values (`PlainRow`), for
        strategies scoring a few candidates without numpy. A source that
        keeps them per row (`plain_rows`, the score cache's node states)
        hands them over without gathering its arrays."""
        kept = getattr(self._state, "plain_rows", None)
        if kept is not None and self._eligible is None:
            return kept(self.rows)
        return list(zip(map(tuple, self.gpu_free.tolist()), map(tuple, self.eligible.tolist()),
                        self.model.tolist(), self.cpu_free.tolist(), self.gpu_idle.tolist()))


# One candidate's figures as Python values: milli-GPU left per device,
# whether this pod may use each device, GPU model id, milli-CPU left, idle milli-GPU.
PlainRow = tuple[tuple[int, ...], tuple[bool, ...], int, int, int]


class Scored(NamedTuple):
    # arrays from `score`, lists from `score_few` (see the module docstring)
    cost: np.ndarray | list[float]
    device: np.ndarray | list[int] | None = None
    tiebreaks: tuple[np.ndarray | list[float], ...] = ()


class StateScores(NamedTuple):
    """Scores given per node state: candidate j's cost is cost[sids[j]],
    and so for the device and each tiebreak; `present`: the states among
    the candidates, ascending (None: not known yet); `packed`: per
    candidate, its cost and tiebreaks as one integer (`ranking.pack_keys`;
    None when they are not all whole numbers)."""
    sids: np.ndarray
    cost: np.ndarray
    device: np.ndarray | None = None
    tiebreaks: tuple[np.ndarray, ...] = ()
    present: np.ndarray | None = None
    packed: np.ndarray | None = None

    def states(self) -> np.ndarray:
        """The distinct states among the candidates, ascending (without np.unique's sort)."""
        if self.present is not None:
            return self.present
        seen = np.zeros(len(self.cost), dtype=bool)
        seen[self.sids] = True
        return seen.nonzero()[0]

    def rows(self) -> Scored:
        """The same scores per candidate."""
        s = self.sids
        return Scored(cost=self.cost[s], device=None if self.device is None else self.device[s],
                      tiebreaks=tuple(t[s] for t in self.tiebreaks))


class GpuStrategy(Protocol):
    name: str
    scores_cpu_pods: bool

    def score(self, candidates: Candidates, shape: Shape) -> Scored: ...


def is_share(shape: Shape) -> bool:
    """A pod asking part of one GPU."""
    return shape.gpu_count == 1 and 0 < shape.gpu_milli < GPU_MILLI


def share_options(c: Candidates, milli: int) -> np.ndarray:
    """(nodes × devices): devices that can take a `milli` share."""
    return c.eligible & (c.gpu_free >= milli)


def whole_devices(gpu_free: np.ndarray, eligible: np.ndarray, count: int) -> list[int]:
    """The `count` lowest-index whole free devices of one node (as the
    simulator's `AllocateExclusiveGpuId`), or [] when there are too few."""
    free = (eligible & (gpu_free == GPU_MILLI)).nonzero()[0]
    return [int(g) for g in free[:count]] if len(free) >= count else []


def sigmoid_score(delta: np.ndarray) -> np.ndarray:
    """FGD's integer node score: ⌊100 · sigmoid(Δ / 1000)⌋ (higher is better)."""
    # exp's argument is capped where the score is 0 anyway (100 / (1 + e^709) < 1e-300): no
    # overflow, so no errstate, which costs more than the rest on a decision's few new states
    return np.floor(100.0 / (1.0 + np.exp(np.minimum(delta / -1000.0, EXP_CAP))))
