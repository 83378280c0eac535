"""Distinct node states for a score cache (`gpu_score_cache`): nodes in the
same figures — free CPU, free milli-GPU and health per device, idle GPU,
GPU model — are in the same state, numbered as first met, and a row-local
strategy scores them alike."""

from __future__ import annotations

import copy

import numpy as np

from .cluster_state import ClusterState
from .gpu_candidates import PlainRow


class NodeStates:
    """Distinct node states, by id: the figures a row-local score reads."""

    FIGURES = ("cpu_free", "gpu_idle", "gpu_model", "gpu_free", "gpu_valid")  # one array each, by state id

    def __init__(self, cluster: ClusterState):
        self.cluster, self.gpu_cols = cluster, cluster.gpu_cols
        self.models = cluster.models  # the cluster's list: model ids never change
        self.ids: dict[tuple, int] = {}
        size, cols = 1024, cluster.gpu_cols
        self.cpu_free = np.zeros(size, dtype=np.int64)
        self.gpu_idle = np.zeros(size, dtype=np.int64)
        self.gpu_model = np.zeros(size, dtype=np.int64)
        self.gpu_free = np.zeros((size, cols), dtype=np.int64)
        self.gpu_valid = np.zeros((size, cols), dtype=bool)
        self.row_state = np.full(cluster.capacity, -1, dtype=np.int64)
        self.plain: list[PlainRow] = []  # the figures of each state as Python values, by id
        # what the strategy derives from each state's figures alone, under a key of its own
        # (`gpu_fgd.frag_before`); the same for every shape, so kept across shapes
        self.derived: dict = {}
        self.seen = 0  # the cluster's version stamp the row states are current to

    def __len__(self) -> int:
        return len(self.ids)

    def plain_rows(self, sids: np.ndarray) -> list[PlainRow]:
        """`Candidates.plain` of states `sids`, kept since each was first met."""
        plain = self.plain
        return [plain[sid] for sid in sids.tolist()]

    def refresh(self) -> None:
        """Give every row that changed since the last refresh its state id."""
        cluster = self.cluster
        if cluster.stamp == self.seen:
            return
        if len(self.row_state) < cluster.capacity:
            self.row_state = np.concatenate([self.row_state, np.full(cluster.capacity - len(self.row_state), -1)])
        n = cluster.size
        touched = cluster.rows_touched_after(self.seen)
        changed = (cluster.version[:n] > self.seen).nonzero()[0].tolist() if touched is None else dict.fromkeys(touched)
        for r in changed:
            key = (int(cluster.gpu_model[r]), int(cluster.cpu_free[r]), int(cluster.gpu_idle[r]),
                   cluster.gpu_free[r].tobytes(), cluster.gpu_valid[r].tobytes())
            sid = self.ids.get(key)
            if sid is None:
                sid = self._add(key, r)
            self.row_state[r] = sid
        self.seen = cluster.stamp

    def compacted(self) -> "NodeStates":
        """A copy holding only the states some row is in now, renumbered: for
        a successor, whose per-shape scores (arrays as long as the states
        known) will be asked only for those. A copy, because the cache these
        states belong to may still be deciding (a scheduling cycle under way)
        with scores numbered as they are."""
        self.refresh()
        rows = self.row_state
        occupied = np.zeros(len(self.ids), dtype=bool)
        occupied[rows[rows >= 0]] = True
        keep = occupied.nonzero()[0]
        renumber = np.full(len(self.ids), -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        fresh = copy.copy(self)
        for name in self.FIGURES:
            setattr(fresh, name, getattr(self, name)[keep])
        fresh.ids = {key: int(renumber[sid]) for key, sid in self.ids.items() if occupied[sid]}
        fresh.plain = [self.plain[sid] for sid in keep.tolist()]
        fresh.derived = {}  # numbered as the states were
        fresh.row_state = np.where(rows >= 0, renumber[rows], -1)
        return fresh

    def _add(self, key: tuple, r: int) -> int:
        sid = len(self.ids)
        if sid == len(self.cpu_free):
            for name in self.FIGURES:
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros((max(len(old), 1024), *old.shape[1:]), old.dtype)]))
        c = self.cluster
        self.cpu_free[sid], self.gpu_idle[sid], self.gpu_model[sid] = c.cpu_free[r], c.gpu_idle[r], c.gpu_model[r]
        self.gpu_free[sid], self.gpu_valid[sid] = c.gpu_free[r], c.gpu_valid[r]
        self.plain.append((tuple(c.gpu_free[r].tolist()), tuple(c.gpu_valid[r].tolist()), key[0], key[1], key[2]))
        self.ids[key] = sid
        return sid
