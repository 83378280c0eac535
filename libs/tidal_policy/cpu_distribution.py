"""§A: how many exclusive CPUs to take on each NUMA node, for every
candidate node at once.

For k CPUs on a node with c NUMA nodes:

- `spread`: each NUMA node gets ⌊k/c⌋; the k mod c leftover CPUs go one each
  to the NUMA nodes with the most free CPUs (ties: lower NUMA column).
  Impossible when any NUMA node lacks its share. 4 CPUs over 2 → 2 + 2.
- `single-numa`: all k on one NUMA node with ≥ k free — the least loaded
  one (ties: lower column). Impossible when none has k free.
- `auto`: §E least-loaded accumulation (`numa_walk`): take NUMA nodes by
  load ascending until their free CPUs cover k, filling each in that order.

The node's NUMA score is the mean load of the NUMA nodes that receive CPUs
(for `auto`, §E's: of the NUMA nodes taken, even one that had no CPU left).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tidal_schemas.common import CpuPolicy

from .numa_walk import NumaChoice, Prefixes, prefixes, walk_from


@dataclass(frozen=True)
class Distribution:
    """Per node: CPUs per NUMA column (zeros when impossible), feasibility
    and the mean load of the NUMA nodes used (inf when impossible)."""

    counts: np.ndarray
    feasible: np.ndarray
    score: np.ndarray


def distribute(policy: CpuPolicy, cpus: int, free: np.ndarray, load: np.ndarray, valid: np.ndarray,
               order: np.ndarray | None = None) -> Distribution:
    """Per-NUMA CPU counts for `cpus` exclusive CPUs under `policy`; arrays
    are (nodes × NUMA columns), `order` the optional cached load order."""
    if policy not in CPU_POLICIES:
        raise ValueError(f"unknown CPU policy {policy!r}")
    counts, walk = CPU_POLICIES[policy](cpus, free, load, valid, order)
    feasible = np.all(counts <= np.where(valid, free, 0), axis=1) & (counts.sum(axis=1) == cpus) & valid.any(axis=1)
    counts = np.where(feasible[:, None], counts, 0)
    used = counts > 0
    n_used = used.sum(axis=1)
    mean = np.where(used, load, 0.0).sum(axis=1) / np.maximum(n_used, 1) if walk is None else walk.score
    return Distribution(counts=counts, feasible=feasible, score=np.where(feasible, mean, np.inf))


def spread_shares(cpus: int, free: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """`spread`'s share of each NUMA node, whether or not it has them free."""
    numa = valid.sum(axis=1)
    base = cpus // np.maximum(numa, 1)
    extra = cpus - base * numa
    # rank NUMA nodes by free CPUs descending; padding (free -1) ranks last
    by_free = np.argsort(-np.where(valid, free, -1), axis=1, kind="stable")
    rank = np.empty_like(by_free)
    np.put_along_axis(rank, by_free, np.arange(free.shape[1])[None, :].repeat(free.shape[0], axis=0), axis=1)
    return np.where(valid, base[:, None] + (rank < extra[:, None]), 0)


def _single(cpus: int, free: np.ndarray, load: np.ndarray, valid: np.ndarray) -> np.ndarray:
    fits = valid & (free >= cpus)
    best = np.argmin(np.where(fits, load, np.inf), axis=1)
    counts = np.zeros(free.shape, dtype=np.int64)
    rows = np.flatnonzero(fits.any(axis=1))
    counts[rows, best[rows]] = cpus
    return counts


def _auto(cpus: int, walk: Prefixes, feasible: np.ndarray) -> np.ndarray:
    before = walk.cum_free - walk.sorted_free  # CPUs the less-loaded NUMA nodes give first
    take_sorted = np.clip(cpus - before, 0, walk.sorted_free)
    counts = np.zeros(walk.sorted_free.shape, dtype=np.int64)
    np.put_along_axis(counts, walk.order, take_sorted, axis=1)
    return np.where(feasible[:, None], counts, 0)


def _auto_walk(cpus: int, free: np.ndarray, load: np.ndarray, valid: np.ndarray,
               order: np.ndarray | None) -> tuple[np.ndarray, NumaChoice]:
    prefix = prefixes(free, load, valid, order)  # once, for the walk and the counts
    walk = walk_from(cpus, prefix, valid.sum(axis=1))
    return _auto(cpus, prefix, walk.feasible), walk


# policy -> (cpus, free, load, valid, order) -> (per-NUMA counts, §E walk or None)
CPU_POLICIES: dict[str, Callable[..., tuple[np.ndarray, NumaChoice | None]]] = {
    "spread": lambda cpus, free, load, valid, order: (spread_shares(cpus, free, valid), None),
    "single-numa": lambda cpus, free, load, valid, order: (_single(cpus, free, load, valid), None),
    "auto": _auto_walk,
}
