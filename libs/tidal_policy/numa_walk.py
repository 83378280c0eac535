"""§E topology-aware NUMA score, vectorised over candidate nodes.

For each node, list its NUMA nodes by load ascending (ties: lower column);
take the first; if its free CPUs cover the request the score is its load;
otherwise keep adding the next NUMA node until the running sum of free CPUs
covers the request. With t NUMA nodes taken,

    score = (load_1 + … + load_t) / t

and the node is infeasible when all its NUMA nodes together cannot cover the
request. The node with the lowest score wins (SPEC §E step 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class NumaChoice:
    """Per node: the §E score (inf when infeasible), which NUMA columns were
    taken, and how many."""

    score: np.ndarray
    taken: np.ndarray
    count: np.ndarray
    feasible: np.ndarray


def load_order(load: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Column indices of each row's NUMA nodes by load ascending, padding last."""
    return np.argsort(np.where(valid, load, np.inf), axis=1, kind="stable")


class Prefixes(NamedTuple):
    """The walk's figures per row, in load order: free CPUs of each NUMA
    node, and of the t least-loaded together with their mean load. Padding
    adds nothing: past the last NUMA node the figures are the all-NUMA ones."""

    order: np.ndarray
    sorted_free: np.ndarray
    cum_free: np.ndarray
    cum_mean: np.ndarray


def prefixes(free: np.ndarray, load: np.ndarray, valid: np.ndarray, order: np.ndarray | None = None) -> Prefixes:
    """The walk's prefixes of every row (the cache keeps them per node, see
    `cluster_arrays`; `numa_lookup` reads them there)."""
    if order is None:
        order = load_order(load, valid)
    sorted_free = np.take_along_axis(np.where(valid, free, 0), order, axis=1)
    sorted_load = np.take_along_axis(np.where(valid, load, 0.0), order, axis=1)
    taken = np.minimum(np.arange(1, free.shape[1] + 1)[None, :], np.maximum(valid.sum(axis=1), 1)[:, None])
    return Prefixes(order, sorted_free, np.cumsum(sorted_free, axis=1), np.cumsum(sorted_load, axis=1) / taken)


def numa_scores(request: int | np.ndarray, free: np.ndarray, load: np.ndarray, valid: np.ndarray,
                order: np.ndarray | None = None) -> NumaChoice:
    """Least-loaded accumulation (§E) for every row.

    `request` is the CPU count to cover (a scalar or one per row), `free`,
    `load`, `valid` are (nodes × NUMA columns); `order` may be passed when the
    load order is already known (it changes only when loads change).
    """
    return walk_from(request, prefixes(free, load, valid, order), valid.sum(axis=1))


def walk_from(request: int | np.ndarray, walk: Prefixes, numa_count: np.ndarray) -> NumaChoice:
    """The §E walk over prefixes already made (`numa_count`: NUMA nodes per row)."""
    width = walk.cum_free.shape[1]
    need = np.asarray(request).reshape(-1, 1)
    before = np.count_nonzero(walk.cum_free < need, axis=1)  # NUMA nodes that did not yet cover
    feasible = (before < width) & (before < numa_count)
    last = np.minimum(before, width - 1)
    score = np.where(feasible, np.take_along_axis(walk.cum_mean, last[:, None], axis=1)[:, 0], np.inf)
    taken_sorted = (np.arange(width)[None, :] <= last[:, None]) & feasible[:, None]
    taken = np.zeros_like(taken_sorted)
    np.put_along_axis(taken, walk.order, taken_sorted, axis=1)
    return NumaChoice(score=score, taken=taken, count=np.where(feasible, last + 1, 0), feasible=feasible)
