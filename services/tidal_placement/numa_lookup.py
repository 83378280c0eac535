"""§A / §E NUMA figures for many nodes from the cache's per-node prefixes
(`ClusterState._numa_head`), without per-pod sorting.

- Shared-pool pod needing c CPUs (§E): walk the load-order prefixes; the
  first t with Σ free ≥ c gives score = mean load of those t. The mean of
  the t least-loaded only grows with t, so a node whose least-loaded
  NUMA node is more loaded than the best score its first NUMA node gives
  another is dropped (score inf): scores are exact wherever a node can
  still be the minimum of `rows`.
- Exclusive CPUs (§A), k CPUs on a node with n NUMA nodes:
  `auto`: feasible iff Σ free ≥ k; score as above.
  `single-numa`: feasible iff max free ≥ k; score = least load among NUMA
  nodes with ≥ k free (the least-loaded one when it fits).
  `spread`: b = ⌊k/n⌋, e = k − b·n; feasible iff the smallest free ≥ b
  and the e-th largest free ≥ b + 1; score = mean of all loads when b ≥ 1,
  else the mean load of the e NUMA nodes with most free.
These agree with `tidal_policy.cpu_distribution.distribute`, which names the counts.
`shared_numa_take` is the §E walk on the one chosen node, read off the same
prefixes: the NUMA nodes a shared-pool pod is placed on; `exclusive_take`
is `distribute` on the one chosen node: the CPUs an exclusive pod gets on each.
"""

from __future__ import annotations

import numpy as np
from tidal_policy.cpu_distribution import distribute

from .cluster_arrays import WALK_NEEDS
from .cluster_state import ClusterState
from .ranking import least, least_to


def shared_numa_scores(state: ClusterState, rows: np.ndarray, need: int, *,
                       all_when_short: bool = True) -> np.ndarray:
    """§E scores of `rows` for `need` CPUs (inf where a node cannot win:
    its least-loaded NUMA node is more loaded than a node's whole score).
    A node whose NUMA nodes cannot cover `need` scores the mean of all of
    them (`all_when_short`), else inf."""
    head = state.numa_head_mean.take(rows)
    covered = state.numa_head_free.take(rows) >= need
    score = np.where(covered, head, np.inf)
    best = score.min() if len(score) else np.inf
    waiting = (~covered & (head <= best)).nonzero()[0]
    if waiting.size:  # the few that may still win walk on
        score[waiting] = _walked(state, rows[waiting], need, all_when_short)
    return score


def _walked(state: ClusterState, rows: np.ndarray, need: int, all_when_short: bool = True) -> np.ndarray:
    # each row's walk, all prefixes at once: the mean load of the first load-order prefix
    # covering `need`, else of every NUMA node (the prefixes' padding repeats the row's
    # whole figures) or inf
    fits = state.numa_cum_free.take(rows, axis=0) >= need
    first = fits.argmax(axis=1)
    walked = state.numa_cum_mean.take(rows * state.numa_cum_mean.shape[1] + first)  # [rows, first], flat
    short = ~fits[:, -1]  # the prefixes only grow: a row whose last does not cover has none that does
    if short.any():
        walked[short] = state.numa_cum_mean[rows[short], -1] if all_when_short else np.inf
    return walked


def shared_numa_least(state: ClusterState, rows: np.ndarray, need: int) -> np.ndarray:
    """The positions in `rows` at the least §E score for `need` CPUs,
    within rounding (`ranking.least` of `shared_numa_scores`). Up to
    `WALK_NEEDS` CPUs each row's walk is kept (`numa_walk`): one gather.
    Past it, a node's score is never below the load of its least-loaded
    NUMA node, and is that load when that node covers `need`: only the
    nodes loaded there no more than the least such score can tie, and most
    ties of a thousand nodes are settled by one pass over those loads."""
    if not len(rows):
        return np.arange(0)
    if 0 <= need <= WALK_NEEDS:
        return least(state.numa_walk[need].take(rows)).nonzero()[0]
    head = state.numa_head_mean.take(rows)
    i = int(head.argmin())
    if state.numa_head_free[rows[i]] >= need:  # the least-loaded covers: its load is the bound
        near = least_to(head, head[i]).nonzero()[0]
        if len(near) == 1:
            return near
    else:
        bound = np.where(state.numa_head_free.take(rows) >= need, head, np.inf).min()
        near = least_to(head, bound).nonzero()[0]
    if len(near) > FEW_ROWS:
        return near[least(_walked(state, rows.take(near), need)).nonzero()[0]]
    # a few rows: each one's walk in plain Python (numpy's per-call cost is most of the work on them)
    scores = [_walk(state, r, need) for r in rows[near].tolist()]
    bound = min(scores)
    limit = bound + 1e-9 * max(1.0, abs(bound))  # as ranking.least
    return near[[j for j, score in enumerate(scores) if score <= limit]]


FEW_ROWS = 4  # rows walked one by one in plain Python, at most


def _walk(state: ClusterState, r: int, need: int) -> float:
    # `_walked` of row r alone
    cum_free = state.numa_cum_free[r].tolist()
    t = next((t for t, free in enumerate(cum_free) if free >= need), len(cum_free) - 1)
    return float(state.numa_cum_mean[r, t])


def shared_numa_take(state: ClusterState, r: int, need: int) -> tuple[float, tuple[int, ...]]:
    """The §E walk on row `r` (`tidal_policy.numa_walk.numa_scores` of that
    row): the mean load of the NUMA nodes taken and their ids; a node whose
    NUMA nodes cannot cover `need` takes them all. Plain Python on one row:
    the chosen node's walk runs once per decision."""
    count = int(state.numa_count[r])
    first = next((t for t, free in enumerate(state.numa_cum_free[r, :count].tolist()) if free >= need), None)
    if first == 0:  # the least-loaded NUMA node covers: its load is the mean (a sum of one is exact)
        return float(state.numa_head_mean[r]), (int(state.numa_id[r, state.numa_order[r, 0]]),)
    cols = sorted(state.numa_order[r, :first + 1].tolist()) if first is not None else list(range(count))
    if not cols:
        return 0.0, ()
    # the mean as ndarray.mean computes it (the same sum, then one division), without its wrapper
    score = float(np.add.reduce(state.numa_load[r, cols])) / len(cols)
    ids = state.numa_id[r].tolist()
    return score, tuple(sorted(ids[j] for j in cols))


def exclusive_take(state: ClusterState, policy: str, cpus: int, r: int) -> tuple[dict[int, int], float]:
    """`distribute` of `cpus` exclusive CPUs on the chosen row `r` (one
    `exclusive_feasible` kept): the CPUs given to each NUMA node, by NUMA id
    (those given none left out), and the NUMA score. Plain Python on one
    row, as `shared_numa_take`: the vectorised form costs 17-47 µs a call
    on a single row (tests/test_placement_numa_lookup.py keeps the two equal)."""
    count = int(state.numa_count[r])
    if not count:  # no NUMA figures: what distribute says of such a row
        dist = distribute(policy, cpus, state.numa_free[r:r + 1], state.numa_load[r:r + 1],
                          state.numa_valid[r:r + 1], state.numa_order[r:r + 1])
        counts = dist.counts[0].tolist()
        return {int(state.numa_id[r, j]): n for j, n in enumerate(counts) if n}, float(dist.score[0])
    free, ids = state.numa_free[r, :count].tolist(), state.numa_id[r, :count].tolist()
    if policy == "auto":  # §E: least loaded first, each filled in turn; scored by the walk's prefixes
        counts, left = [0] * count, cpus
        for j in state.numa_order[r, :count].tolist():
            counts[j] = min(free[j], left)
            left -= counts[j]
        last = next(t for t, total in enumerate(state.numa_cum_free[r, :count].tolist()) if total >= cpus)
        return {ids[j]: n for j, n in enumerate(counts) if n}, float(state.numa_cum_mean[r, last])
    if policy == "single-numa":  # the least loaded NUMA node that fits (ties: lower column)
        load = state.numa_load[r, :count].tolist()
        best = min((j for j in range(count) if free[j] >= cpus), key=load.__getitem__)
        return ({ids[best]: cpus}, load[best]) if cpus else ({}, 0.0)  # no CPU: no NUMA node used
    if policy == "spread":  # an even share each, the remainder to those with most free (ties: lower column)
        base, extra = divmod(cpus, count)
        counts = [base] * count
        for j in sorted(range(count), key=lambda j: -free[j])[:extra]:
            counts[j] += 1
        used = np.zeros(state.numa_cols, dtype=bool)
        used[:count] = [n > 0 for n in counts]
        # the mean as distribute computes it: the same sum over the row, then one division
        score = float(np.add.reduce(np.where(used, state.numa_load[r], 0.0))) / max(int(used.sum()), 1)
        return {ids[j]: n for j, n in enumerate(counts) if n}, score
    raise ValueError(f"unknown CPU policy {policy!r}")


def exclusive_feasible(state: ClusterState, policy: str, cpus: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Which of `rows` (None: of the rows in use, a filter stage of
    `decide`) can give `cpus` exclusive CPUs under `policy`."""
    n = state.size
    if policy == "auto":
        return (state.numa_cum_free[:n, -1] if rows is None else state.numa_cum_free[:, -1].take(rows)) >= cpus
    if policy == "single-numa":
        return (state.numa_max_free[:n] if rows is None else state.numa_max_free.take(rows)) >= cpus
    if policy == "spread":
        rows = np.arange(n) if rows is None else rows
        count = state.numa_count.take(rows)
        base = cpus // np.maximum(count, 1)
        extra = cpus - base * count
        at = rows * state.numa_free_desc.shape[1]  # [rows, column] as flat positions
        low = state.numa_free_desc.take(at + np.maximum(count - 1, 0)) >= base
        high = (extra == 0) | (state.numa_free_desc.take(at + np.maximum(extra - 1, 0)) >= base + 1)
        return (count > 0) & low & high
    raise ValueError(f"unknown CPU policy {policy!r}")


def exclusive_scores(state: ClusterState, policy: str, cpus: int, rows: np.ndarray) -> np.ndarray:
    """NUMA score of feasible `rows` (inf where a node cannot be the minimum)."""
    if policy == "auto":
        return shared_numa_scores(state, rows, cpus, all_when_short=False)
    if policy == "spread":
        count = state.numa_count.take(rows)
        base = cpus // np.maximum(count, 1)
        extra = np.maximum(cpus - base * count, 1)
        few = state.numa_desc_cum_load.take(rows * state.numa_desc_cum_load.shape[1] + extra - 1) / extra
        return np.where(base >= 1, state.numa_cum_mean[:, -1].take(rows), few)
    if policy == "single-numa":
        head_fits = state.numa_head_free.take(rows) >= cpus
        head = state.numa_head_mean.take(rows)
        score = np.where(head_fits, head, np.inf)
        todo = (~head_fits & (head <= score.min())).nonzero()[0]
        if todo.size:
            sub = rows.take(todo)
            fits = state.numa_valid.take(sub, axis=0) & (state.numa_free.take(sub, axis=0) >= cpus)
            score[todo] = np.where(fits, state.numa_load.take(sub, axis=0), np.inf).min(axis=1)
        return score
    raise ValueError(f"unknown CPU policy {policy!r}")
