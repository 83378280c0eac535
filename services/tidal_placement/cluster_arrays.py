"""Storage of the scheduler cache: one row of numpy arrays per node, NUMA and
GPU columns padded to the widest node, and the figures derived from a row.

Derived per row (kept current on every change of that row):
- `cpu_free`, `mem_free`: allocatable − held, clamped at 0;
- `numa_free[j]`: exclusive CPUs of NUMA column j not held; `numa_max_free`;
- `gpu_free[g]`: milli device g can still give — 1000 − milli held on it,
  within what its physical GPU has left (`device_budget`; 0 for padding /
  unhealthy); `gpu_idle` (Σ over physical GPUs), `gpu_whole` (physical GPUs
  with a fully free device: the most whole GPUs one pod can get), `gpu_max`;
- NUMA prefixes for §A/§E lookups (`numa_lookup`): in load order
  (`numa_order`), cumulative free CPUs and mean load of the t least-loaded
  NUMA nodes; in free-descending order (ties: lower column), free CPUs and
  cumulative load. Padding repeats the all-NUMA figures (`numa_free_desc`
  pads with −1). `numa_head_free` / `numa_head_mean` repeat the first
  column of the load-order prefixes as plain vectors: §E looks at that
  column for every candidate, and a vector gathers faster than a column;
- `numa_walk[need, row]`: §E's walk for a shared-pool pod of `need` CPUs
  (up to `WALK_NEEDS`) — the mean load of the shortest load-order prefix
  covering `need`, else of every NUMA node — one vector per request size,
  so a decision gathers its candidates' scores from one vector.

The decision path gathers candidates' figures with `ndarray.take`, not
fancy indexing: on numpy 2.4, 4,000 rows of a 1-D array take 1.8 µs
against 2.4, and of an 8-column array 6 µs against 27.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np

from tidal_schemas.common import GPU_MILLI

from .device_budget import node_gpu_figures, unsliced_gpu_figures

TOUCHED_REMEMBERED = 1 << 16  # recent row versions kept for readers catching up (a few per decision)
# Shared-pool CPUs (whole CPUs asked) with a kept §E walk per row: most pods ask
# a few; a larger ask walks the prefixes instead (`numa_lookup.shared_numa_least`).
WALK_NEEDS = 32

# name: (dtype, fill value) — per node row, per (row, NUMA column), per (row, GPU column)
ROW_ARRAYS = {
    "present": (bool, False), "schedulable": (bool, False), "exclusive_ok": (bool, False),
    "cpu_alloc": (np.int64, 0), "cpu_used": (np.int64, 0), "cpu_free": (np.int64, 0),
    "mem_alloc": (np.int64, 0), "mem_used": (np.int64, 0), "mem_free": (np.int64, 0),
    "node_load": (np.float64, 0.0), "numa_count": (np.int64, 0), "numa_max_free": (np.int64, 0),
    "gpu_model": (np.int64, -1), "gpu_count": (np.int64, 0), "gpu_idle": (np.int64, 0),
    "gpu_whole": (np.int64, 0), "gpu_max": (np.int64, 0), "version": (np.int64, 0),
    "numa_head_free": (np.int64, 0), "numa_head_mean": (np.float64, 0.0),
}
NUMA_ARRAYS = {
    "numa_valid": (bool, False), "numa_id": (np.int64, -1), "numa_alloc": (np.int64, 0),
    "numa_used": (np.int64, 0), "numa_free": (np.int64, 0), "numa_load": (np.float64, 0.0),
    "numa_order": (np.int64, 0), "numa_cum_free": (np.int64, 0), "numa_cum_mean": (np.float64, 0.0),
    "numa_free_desc": (np.int64, -1), "numa_desc_cum_load": (np.float64, 0.0),
}
GPU_ARRAYS = {
    "gpu_valid": (bool, False), "gpu_used": (np.int64, 0), "gpu_free": (np.int64, 0),
    "gpu_virtual": (bool, False), "gpu_dev_model": (np.int64, -1),
    "gpu_root": (np.int64, -1), "gpu_weight": (np.int64, GPU_MILLI),  # root −1: padding, its own root
}


class ClusterArrays:
    """Growable per-node arrays (one attribute per entry of the tables
    above); `ClusterState` owns `names` and fills and updates the rows."""

    names: list[str | None]
    sliced_rows: set[int]
    _stamp: int = 0
    # the rows of the latest versions, in order: _touched[i] got version _touched_base + i + 1
    _touched: list[int]
    _touched_base: int = 0

    @property
    def size(self) -> int:
        """Number of rows in use (present or spare)."""
        return len(self.names)

    def _refresh_node(self, r: int) -> None:
        self.cpu_free[r] = max(int(self.cpu_alloc[r] - self.cpu_used[r]), 0)
        self.mem_free[r] = max(int(self.mem_alloc[r] - self.mem_used[r]), 0)
        self._touch(r)

    @property
    def stamp(self) -> int:
        """The latest version given to any row."""
        return self._stamp

    def rows_touched_after(self, stamp: int) -> list[int] | None:
        """The rows given a version after `stamp` (with repeats), or None when
        that is too long ago to be remembered (then compare `version`)."""
        start = stamp - self._touched_base
        return None if start < 0 else self._touched[start:]

    def _touch(self, r: int) -> None:
        self._stamp += 1
        self.version[r] = self._stamp
        self._touched.append(r)
        if len(self._touched) > TOUCHED_REMEMBERED:
            forget = len(self._touched) // 2
            del self._touched[:forget]
            self._touched_base += forget

    def _recount(self, r: int) -> None:
        """Recompute the row's derived figures (free per NUMA / GPU, GPU summaries)."""
        self._refresh_node(r)
        self._refresh_numa(r)
        self._refresh_gpus(r)

    def _refresh_numa(self, r: int) -> None:
        self.numa_free[r] = np.where(self.numa_valid[r], np.maximum(self.numa_alloc[r] - self.numa_used[r], 0), 0)
        self._numa_head(r)

    def _refresh_gpus(self, r: int) -> None:
        if r in self.sliced_rows:
            figures = node_gpu_figures(self.gpu_used[r], self.gpu_valid[r], self.gpu_root[r], self.gpu_weight[r],
                                       sliced=True)
        else:
            figures = unsliced_gpu_figures(self.gpu_used[r], self.gpu_valid[r])
        self.gpu_free[r], self.gpu_idle[r], self.gpu_whole[r], self.gpu_max[r] = figures
        self._touch(r)

    def _order_numa(self, r: int) -> None:
        # §E ranks NUMA nodes by load; padding sorts last. Loads change only
        # on metric updates, so the order is cached instead of sorted per pod.
        count = int(self.numa_count[r])
        load = self.numa_load[r, :count].tolist()
        self.numa_order[r] = sorted(range(count), key=load.__getitem__) + list(range(count, self.numa_cols))
        self._numa_head(r)

    def _numa_head(self, r: int) -> None:
        # Per-node prefixes that turn §A/§E scores into column lookups:
        # in load order, free CPUs of the t least-loaded NUMA nodes and their
        # mean load; in free-descending order (ties: lower column), free CPUs
        # and summed load — the NUMA nodes `spread` gives its remainder to.
        # Padding repeats the all-NUMA figures (free_desc pads with -1).
        # `tidal_policy.numa_walk.prefixes` of this one row, in plain Python: a row has a few
        # NUMA nodes, and numpy's per-call cost is most of the work on arrays this small
        # (tests/test_placement_numa_lookup.py keeps them equal).
        count = int(self.numa_count[r])
        if not count:
            self.numa_walk[:, r] = 0.0  # no NUMA figures: the walk of zeros that the prefixes hold
            return
        pad = self.numa_cols - count
        load = self.numa_load[r, :count].tolist()
        free = self.numa_free[r, :count].tolist()
        by_load = self.numa_order[r, :count].tolist()
        cum_free = list(accumulate(free[j] for j in by_load))
        cum_mean = [total / n for n, total in enumerate(accumulate(load[j] for j in by_load), 1)]
        self.numa_cum_free[r] = cum_free + cum_free[-1:] * pad
        self.numa_cum_mean[r] = cum_mean + cum_mean[-1:] * pad
        self.numa_head_free[r], self.numa_head_mean[r] = cum_free[0], cum_mean[0]
        by_free = sorted(range(count), key=lambda j: -free[j])
        desc_load = list(accumulate(load[j] for j in by_free))
        self.numa_free_desc[r] = [free[j] for j in by_free] + [-1] * pad
        self.numa_desc_cum_load[r] = desc_load + desc_load[-1:] * pad
        self.numa_max_free[r] = max(free)
        walk: list[float] = []  # by need: the first prefix covering it, else all of them
        for total, mean in zip(cum_free, cum_mean):
            walk += [mean] * (min(total, WALK_NEEDS) + 1 - len(walk))
        self.numa_walk[:, r] = walk + cum_mean[-1:] * (WALK_NEEDS + 1 - len(walk))

    def _resize(self, rows: int, numa_cols: int, gpu_cols: int) -> None:
        old = getattr(self, "capacity", 0)
        capacity = max(old, 1)
        while capacity < rows:
            capacity *= 2
        same_cols = (numa_cols, gpu_cols) == (getattr(self, "numa_cols", -1), getattr(self, "gpu_cols", -1))
        if old == capacity and same_cols:
            return
        for table, cols in ((ROW_ARRAYS, None), (NUMA_ARRAYS, numa_cols), (GPU_ARRAYS, gpu_cols)):
            for attr, (dtype, fill) in table.items():
                shape = (capacity,) if cols is None else (capacity, cols)
                fresh = np.full(shape, fill, dtype=dtype)
                prev = getattr(self, attr, None)
                if prev is not None:
                    fresh[tuple(slice(0, s) for s in prev.shape)] = prev
                setattr(self, attr, fresh)
        walk = np.zeros((WALK_NEEDS + 1, capacity))  # by need, then row: a need's walks are one vector
        prev = getattr(self, "numa_walk", None)
        if prev is not None:
            walk[:, :prev.shape[1]] = prev
        self.numa_walk = walk
        self.capacity, self.numa_cols, self.gpu_cols = capacity, numa_cols, gpu_cols
