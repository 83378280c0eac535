"""An upper bound on the GPU allocation any placement of the openb protocol
could reach: a linear relaxation over node types.

Nodes are grouped into types (GPU model, GPUs, CPU, memory) and the
arrived pods into classes (CPU, memory, milli-GPU per GPU, GPUs, allowed
models). x[c, t] ≥ 0 is how many pods of class c go to nodes of type t,
allowed only where one such pod fits one such node: its models admit the
node's (a CPU-only pod: any node), and its GPUs, CPU and memory fit a node
alone. Maximise the milli-GPU placed subject to

    Σ_t x[c, t] ≤ n_c                                  (pods of the class)
    Σ_c x[c, t] · r_c ≤ N_t · R_t    for r = CPU, memory, milli-GPU
    x[c, t] ≤ N_t · ⌊G_t / g_c⌋      (a g-GPU pod takes g of a node's G_t)

Every placement (fractional pods aside) satisfies these, so no placement —
online, offline, joint or not — places more GPU than the optimum. It is a
relaxation: it lets a pod's CPU and GPU spread over a type's nodes, so
the gap it leaves is an upper bound on what any strategy could still win.
Solved with HiGHS through scipy (the `dev` extra); `bench/placement_openb.py
--bound` prints it beside the strategies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .openb import TraceNode, TracePod


@dataclass(frozen=True)
class Bound:
    """The relaxation's optimum for one set of arrived pods."""

    gpu_milli: float  # at most this much milli-GPU can be placed
    capacity_milli: int
    classes: int
    types: int

    @property
    def alloc_pct(self) -> float:
        return 100.0 * self.gpu_milli / self.capacity_milli


def allocation_bound(nodes: Sequence[TraceNode], pods: Sequence[TracePod]) -> Bound:
    """The relaxation (module docstring) for `pods` on `nodes`."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    types = Counter((n.model if n.gpus else "", n.gpus, n.cpu_milli, n.memory_mib) for n in nodes)
    classes = Counter((p.cpu_milli, p.memory_mib, p.gpu_milli if p.num_gpu else 0, p.num_gpu, tuple(p.gpu_spec))
                      for p in pods)
    type_list, class_list = list(types), list(classes)
    capacity = 1000 * sum(n.gpus for n in nodes)
    columns: list[tuple[int, int, int]] = []  # (class, type, most such pods on such nodes)
    for c, (cpu, mem, milli, count, models) in enumerate(class_list):
        for t, (model, gpus, node_cpu, node_mem) in enumerate(type_list):
            if cpu > node_cpu or mem > node_mem or count > gpus:
                continue
            if count and models and model not in models:
                continue
            per_node = gpus // count if count else None
            columns.append((c, t, per_node))
    if not columns:
        return Bound(0.0, capacity, len(class_list), len(type_list))
    rows, cols, vals = [], [], []
    # rows: classes, then per type CPU, memory, GPU
    k = len(class_list)
    for j, (c, t, _) in enumerate(columns):
        cpu, mem, milli, count, _models = class_list[c]
        for row, value in ((c, 1.0), (k + 3 * t, cpu), (k + 3 * t + 1, mem), (k + 3 * t + 2, milli * count)):
            if value:
                rows.append(row)
                cols.append(j)
                vals.append(float(value))
    limits = [float(classes[key]) for key in class_list]
    for model, gpus, node_cpu, node_mem in type_list:
        count = types[(model, gpus, node_cpu, node_mem)]
        limits += [float(count * node_cpu), float(count * node_mem), float(count * 1000 * gpus)]
    upper = [None if per_node is None else float(types[type_list[t]] * per_node) for _, t, per_node in columns]
    gain = np.array([-float(class_list[c][2] * class_list[c][3]) for c, _, _ in columns])
    a = coo_matrix((vals, (rows, cols)), shape=(len(limits), len(columns))).tocsr()
    result = linprog(gain, A_ub=a, b_ub=np.array(limits), bounds=[(0, u) for u in upper], method="highs")
    if result.status != 0:
        raise RuntimeError(f"the allocation bound did not solve: {result.message}")
    return Bound(float(-result.fun), capacity, len(class_list), len(type_list))
