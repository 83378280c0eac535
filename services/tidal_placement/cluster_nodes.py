"""The node side of the scheduler cache: rows by node name, allocatable,
reasons a node takes no new pods, NUMA loads, and reads by name. The pod
side (what is held where) is `cluster_state.ClusterState`, built on this."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tidal_schemas import NodeScore, Resources

from .allocation import OK, Outcome
from .cluster_arrays import ClusterArrays


class ClusterNodes(ClusterArrays):
    """Node rows of the cache; the attributes are made by `ClusterState`."""

    def set_allocatable(self, node: str, resources: Resources) -> Outcome:
        """Replace node-level CPU/memory allocatable (e.g. oversold by §D)."""
        return self.book(node, resources.cpu_milli, resources.memory_mib)

    def book(self, node: str, cpu_milli: int, memory_mib: int) -> Outcome:
        """`set_allocatable` from the two figures."""
        r = self.rows.get(node)
        if r is None:
            return Outcome(False, f"unknown node {node}")
        self.cpu_alloc[r], self.mem_alloc[r] = cpu_milli, memory_mib
        self._refresh_node(r)
        return OK

    def allocatable(self, node: str) -> Resources | None:
        """The node-level CPU/memory allocatable placement counts with."""
        r = self.rows.get(node)
        return None if r is None else Resources(cpu_milli=int(self.cpu_alloc[r]), memory_mib=int(self.mem_alloc[r]))

    def figures(self, node: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """((cpu_milli, memory_mib) booked, the same as its topology says) of
        a known node; None for a node not known."""
        r = self.rows.get(node)
        spec = self.specs.get(r) if r is not None else None
        if spec is None:
            return None
        return (int(self.cpu_alloc[r]), int(self.mem_alloc[r])), (spec.cpu_milli, spec.memory_mib)

    def set_blocked(self, node: str, reason: str, blocked: bool = True) -> Outcome:
        """Add (or lift) a reason the node takes no new pods: a taint, stale metrics…"""
        r = self.rows.get(node)
        if r is None:
            return Outcome(False, f"unknown node {node}")
        reasons = self._blocked.setdefault(r, set())
        if (reason in reasons) != blocked:
            (reasons.add if blocked else reasons.discard)(reason)
            self._blocked_masks = None
        self.schedulable[r] = not reasons
        if not reasons:
            del self._blocked[r]
        return OK

    def blocked(self, node: str) -> frozenset[str]:
        """The reasons `node` takes no new pods (empty: it takes them)."""
        r = self.rows.get(node)
        return frozenset(self._blocked.get(r, ())) if r is not None else frozenset()

    def blocked_masks(self, n: int) -> list[tuple[str, np.ndarray]]:
        """Per reason some of the first `n` rows take no new pods, the mask of
        the rows it leaves, by reason name: the filter's first stages, so a
        decision counts nodes out by reason (a row blocked for several reasons
        counts under the first). Built again only when a reason or `n` changed:
        staleness alone blocks every node of a cluster that stopped sampling,
        and each decision reads them. The masks are read-only."""
        if self._blocked_masks is not None and self._blocked_masks[0] == n:
            return self._blocked_masks[1]
        rows: dict[str, list[int]] = {}
        for r, reasons in self._blocked.items():
            if r < n:
                for reason in reasons:
                    rows.setdefault(reason, []).append(r)
        masks = []
        for reason in sorted(rows):
            mask = np.ones(n, dtype=bool)
            mask[rows[reason]] = False
            mask.flags.writeable = False
            masks.append((reason, mask))
        self._blocked_masks = (n, masks)
        return masks

    def update_load(self, node: str, numa_load: Mapping[int, float], node_load: float | None = None) -> Outcome:
        """Set NUMA loads (by NUMA id) and the node load (default: their mean, §E)."""
        r = self.rows.get(node)
        if r is None:
            return Outcome(False, f"unknown node {node}")
        cols = self._numa_col[r]
        for numa, load in numa_load.items():
            if numa in cols:
                self.numa_load[r, cols[numa]] = load
        n = int(self.numa_count[r])
        self.node_load[r] = node_load if node_load is not None else float(self.numa_load[r, :n].mean())
        self._order_numa(r)
        return OK

    def apply_node_score(self, score: NodeScore) -> Outcome:
        """Take the loads of a scoring-service `NodeScore`."""
        return self.update_load(score.node, score.numa_load, score.load)

    def free_by_node(self) -> dict[str, dict]:
        """Every known node's free figures by name and id (plain data, for
        comparing two caches and for operators)."""
        figures = {}
        for node, r in sorted(self.rows.items()):
            figures[node] = {
                "cpu_milli": int(self.cpu_free[r]), "memory_mib": int(self.mem_free[r]),
                "numa_cpus": {int(numa): int(self.numa_free[r, j]) for numa, j in self._numa_col[r].items()},
                "gpu_milli": {gpu: int(self.gpu_free[r, k]) for gpu, k in self._gpu_col[r].items()},
            }
        return figures

    def gpu_id(self, row: int, col: int) -> str:
        """The GPU id stored in column `col` of `row`."""
        return self.specs[row].gpu_ids[col]

    def _model_id(self, model: str) -> int:
        if model not in self.model_ids:
            self.model_ids[model] = len(self.models)
            self.models.append(model)
        return self.model_ids[model]

    def _new_row(self, name: str) -> int:
        if self._spare:
            r = self._spare.pop()
            self.names[r] = name
        else:
            r = len(self.names)
            self.names.append(name)
        self.rows[name] = r
        return r
