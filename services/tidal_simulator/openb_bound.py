"""An upper bound on the GPU allocation any placement of the openb
protocol could reach: an integer programme over node types, with the pods the
protocol's rule forces to be placed, and the metric's own averaging.

**The programme.** Nodes are grouped into types (GPU model, GPUs, CPU,
memory) and pods into classes (CPU, memory, milli-GPU per GPU, GPUs,
allowed models). x[c, t] ≥ 0 is how many pods of class c go to nodes of
type t, an integer, allowed only where one such pod fits one such node
empty. Maximise
the milli-GPU placed subject to

    f_c ≤ Σ_t x[c, t] ≤ n_c                            (pods of the class)
    Σ_c x[c, t] · r_c ≤ N_t · R_t    for r = CPU, memory, milli-GPU
    x[c, t] ≤ N_t · ⌊G_t / g_c⌋      (a g-GPU pod takes g of a node's G_t;
                                      a share of q: N_t · G_t · ⌊1000 / q⌋)

**The forced pods f_c.** The protocol skips a pod only if, when it is
decided, no node can take it. A node that fits pod p empty cannot take it
only if it is *blocked* in some resource: used CPU ≥ C − c_p + 1, or used
memory ≥ M − m_p + 1, or fewer than g_p of its GPUs with q_p milli free —
at least G − g_p + 1 GPUs each with used ≥ max(1001 − q_p, q_min), q_min
the smallest per-GPU request of the pods (a used GPU holds at least one).
What is used then is held by pods that arrived before p, so its total in
each resource is at most R_prior(p), the sum of their requests. p can be
skipped only if (1) at least as many pods arrived before it as there are
nodes fitting it (each blocked node holds one); (2) some s[t, r] ≥ 0
(nodes of type t blocked in r) has Σ_r s[t, r] = N_t for every type
fitting p and Σ_t s[t, r] · cost[t, r] ≤ R_prior(p) for every r
(`blockable`); (3) for a CPU-only pod, the pods before it can be split
between the nodes blocked in CPU and those blocked in memory, each pod
counting on one side only (`cpu_only_blockable`). Each is a relaxation of
the real blocking (pods and nodes fractional), so it says "can be skipped"
at least as often as the truth. If any fails, p is forced. R_prior
only grows along the order, so a class's forced pods are its first
arrivals, found by bisection. For a joint window this holds too: a pod
the chosen plan leaves out was left out by the window's queue order
(`keep_placed`), which decides it on pods arrived before it.

**Soundness.** Any run of the protocol, per arrival or per window, ends
with a placement of the pods arrived by line i that fits every node, so
it satisfies the type totals (summing each node's constraints), places
each pod where it fits alone, and places every forced pod: a feasible
point of the programme. So the GPU it places is at most the optimum B_i.
Also it places at most the GPU of the arrived pods that fit some node
empty, A_i. Allocation never falls as pods arrive, so every line i up to
the last line L of a level has alloc_i ≤ min(A_i, B_L), and the level's
figure — the mean of alloc_i over its lines (`openb_replay.at_levels`) —
is at most the mean of min(A_i, B_L) over the same lines (`level_bound`).

It is still a relaxation: a type's CPU and GPU are pooled across its
nodes, so it cannot see stranding on single nodes. Solved by HiGHS's
branch and bound through scipy (the `dev` extra) up to NODE_LIMIT nodes
(a count, not a time: the same figure on any machine); what it returns is
its proven upper bound, which is the optimum when it finishes and above
it otherwise. `bench/placement_openb.py --bound` prints it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .openb import TraceNode, TracePod

Kind = tuple[str, int, int, int]  # node type: GPU model, GPUs, CPU, memory
Klass = tuple[int, int, int, int, tuple[str, ...]]  # pod class: CPU, memory, milli per GPU, GPUs, models
NODE_LIMIT = 2000  # branch-and-bound nodes; past it the solver's proven bound is used (still a bound)


@dataclass(frozen=True)
class Bound:
    """The relaxation's optimum for one set of arrived pods."""

    gpu_milli: float  # at most this much milli-GPU can be placed
    capacity_milli: int
    classes: int
    types: int
    forced: int = 0  # pods the protocol must place (f_c summed)

    @property
    def alloc_pct(self) -> float:
        return 100.0 * self.gpu_milli / self.capacity_milli


def node_type(n: TraceNode) -> Kind:
    return (n.model if n.gpus else "", n.gpus, n.cpu_milli, n.memory_mib)


def pod_class(p: TracePod) -> Klass:
    return (p.cpu_milli, p.memory_mib, p.gpu_milli if p.num_gpu else 0, p.num_gpu, tuple(p.gpu_spec))


def fits_empty(c: Klass, t: Kind) -> bool:
    """Whether one pod of class c fits one empty node of type t."""
    cpu, mem, _milli, count, models = c
    model, gpus, node_cpu, node_mem = t
    return cpu <= node_cpu and mem <= node_mem and count <= gpus and not (count and models and model not in models)


def per_node(c: Klass, gpus: int) -> int | None:
    """The most pods of class c one node with `gpus` GPUs can hold by its
    GPUs alone: ⌊G / g⌋ whole-GPU pods, G · ⌊1000 / q⌋ shares of q (None: no GPU asked)."""
    _, _, milli, count, _ = c
    if not count:
        return None
    return gpus * (1000 // milli) if count == 1 and milli < 1000 else gpus // count


def allocation_bound(nodes: Sequence[TraceNode], pods: Sequence[TracePod],
                     forced: Counter | None = None) -> Bound:
    """The programme (module docstring) for `pods` on `nodes`; `forced`:
    class → pods of it that must be placed (none if not given)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    forced = forced or Counter()
    types = Counter(node_type(n) for n in nodes)
    classes = Counter(pod_class(p) for p in pods)
    type_list, class_list = list(types), list(classes)
    capacity = 1000 * sum(n.gpus for n in nodes)
    columns = [(c, t, per_node(class_list[c], type_list[t][1]))
               for c in range(len(class_list)) for t in range(len(type_list))
               if fits_empty(class_list[c], type_list[t])]  # (class, type, most such pods on such a node)
    must = sum(forced.values())
    if not columns:
        return Bound(0.0, capacity, len(class_list), len(type_list), must)
    rows, cols, vals = [], [], []
    # rows: classes (≤ n_c), classes again (−Σ ≤ −f_c), then per type CPU, memory, GPU
    k = len(class_list)
    for j, (c, t, _) in enumerate(columns):
        cpu, mem, milli, count, _models = class_list[c]
        for row, value in ((c, 1.0), (k + c, -1.0), (2 * k + 3 * t, cpu), (2 * k + 3 * t + 1, mem),
                           (2 * k + 3 * t + 2, milli * count)):
            if value:
                rows.append(row)
                cols.append(j)
                vals.append(float(value))
    limits = [float(classes[key]) for key in class_list] + [-float(forced.get(key, 0)) for key in class_list]
    for kind in type_list:
        count, (_, gpus, node_cpu, node_mem) = types[kind], kind
        limits += [float(count * node_cpu), float(count * node_mem), float(count * 1000 * gpus)]
    upper = [None if per_node is None else float(types[type_list[t]] * per_node) for _, t, per_node in columns]
    gain = np.array([-float(class_list[c][2] * class_list[c][3]) for c, _, _ in columns])
    a = coo_matrix((vals, (rows, cols)), shape=(len(limits), len(columns))).tocsr()
    lower_bounds = np.zeros(len(columns))
    upper_bounds = np.array([np.inf if u is None else u for u in upper])
    result = milp(gain, constraints=LinearConstraint(a, -np.inf, np.array(limits)), integrality=np.ones(len(columns)),
                  bounds=Bounds(lower_bounds, upper_bounds), options={"node_limit": NODE_LIMIT})
    best = getattr(result, "mip_dual_bound", None)
    if result.status in (2, 3) or best is None or not np.isfinite(best):  # else optimal, or stopped at a limit
        # a real run is a feasible point: infeasible means a wrong forced set
        raise RuntimeError(f"the allocation bound did not solve: {result.message}")
    return Bound(float(-best), capacity, len(class_list), len(type_list), must)


def blocking_costs(c: Klass, types: Counter, least_milli: int) -> list[tuple[int, tuple[float, float, float]]]:
    """Per node type that fits class c empty: (nodes, the least CPU,
    memory and milli-GPU that block one such node for c; inf: cannot)."""
    cpu, mem, milli, count, _ = c
    out = []
    for t, n in types.items():
        if not fits_empty(c, t):
            continue
        _, gpus, node_cpu, node_mem = t
        gpu = (gpus - count + 1) * max(1001 - (milli or 1000), least_milli) if count else np.inf
        out.append((n, (float(node_cpu - cpu + 1), float(node_mem - mem + 1), float(gpu))))
    return out


def blockable(costs: list[tuple[int, tuple[float, float, float]]], prior: Sequence[float]) -> bool:
    """Whether usage within `prior` (CPU, memory, milli-GPU totals) could
    block every node that fits the pod (the s[t, r] of the module docstring)."""
    from scipy.optimize import linprog

    if not costs:
        return True  # it fits no node: skipped whatever was placed
    usable = [(n, [(r, cost) for r, cost in enumerate(kind) if cost <= prior[r]]) for n, kind in costs]
    if any(not ways for _, ways in usable):
        return False  # a node that no resource could block alone
    variables = [(t, r, cost) for t, (_, ways) in enumerate(usable) for r, cost in ways]
    if len({r for _, r, _ in variables}) == 1:  # one resource: its total decides
        r = variables[0][1]
        return sum(n * cost for (n, _), (_, _, cost) in zip(usable, variables)) <= prior[r]
    a_eq = np.zeros((len(usable), len(variables)))
    a_ub = np.zeros((3, len(variables)))
    for j, (t, r, cost) in enumerate(variables):
        a_eq[t, j], a_ub[r, j] = 1.0, cost
    result = linprog(np.zeros(len(variables)), A_ub=a_ub, b_ub=np.array(prior, dtype=float), A_eq=a_eq,
                     b_eq=np.array([float(n) for n, _ in usable]), bounds=(0, None), method="highs")
    return result.status == 0


def cpu_only_blockable(costs: list[tuple[int, tuple[float, float, float]]], cpu: np.ndarray,
                       mem: np.ndarray) -> bool:
    """For a CPU-only pod (nodes are blocked in CPU or memory only):
    whether the pods before it — `cpu`, `mem` per pod — could be split
    into a group with CPU ≥ K_c on the nodes blocked in CPU and a group
    with memory ≥ K_m on those blocked in memory. Every pod sits on one
    node, so it counts in one group only: tighter than `blockable`'s
    totals. Fractionally, the group for CPU is best made of the pods with
    the least memory per CPU, and the nodes blocked in CPU are best those
    with the most memory cost per CPU cost; the slack
    g(K) = M_prior − least_mem(K) − least_K_m(K) is concave in K = K_c, so
    its maximum is at a breakpoint of either curve."""
    if not costs:
        return True
    order = np.argsort(mem / np.maximum(cpu, 1e-9), kind="stable")
    cum_cpu = np.concatenate(([0.0], np.cumsum(cpu[order], dtype=float)))
    cum_mem = np.concatenate(([0.0], np.cumsum(mem[order], dtype=float)))
    nodes = np.array([n for n, _ in costs], dtype=float)
    a = np.array([c[0] for _, c in costs])
    b = np.array([c[1] for _, c in costs])
    by = np.argsort(-b / a, kind="stable")
    cum_a = np.concatenate(([0.0], np.cumsum(nodes[by] * a[by])))
    cum_b = np.concatenate(([0.0], np.cumsum(nodes[by] * b[by])))
    top = min(cum_cpu[-1], cum_a[-1])
    k = np.concatenate((cum_cpu, cum_a, [top]))
    k = k[k <= top]
    slack = cum_mem[-1] - np.interp(k, cum_cpu, cum_mem) - (cum_b[-1] - np.interp(k, cum_a, cum_b))
    return bool(slack.max() >= -1e-6)


def forced_counts(nodes: Sequence[TraceNode], sequence: Sequence[TracePod]) -> Counter:
    """Class → how many of its pods in `sequence` the protocol must place
    (its first arrivals that no usage of the pods before them can block)."""
    types = Counter(node_type(n) for n in nodes)
    least = min((p.gpu_milli for p in sequence if p.num_gpu), default=1)
    asks = np.array([(p.cpu_milli, p.memory_mib, p.num_gpu * p.gpu_milli) for p in sequence], dtype=float)
    prior = np.zeros((len(sequence) + 1, 3))
    prior[1:] = np.cumsum(asks.reshape(-1, 3), axis=0)
    where: dict[Klass, list[int]] = {}
    for i, p in enumerate(sequence):
        where.setdefault(pod_class(p), []).append(i)
    out = Counter()
    for c, at in where.items():
        costs = blocking_costs(c, types, least)
        lo, hi = 0, len(at)  # the first `lo` are forced; from `hi` on they may be skipped
        while lo < hi:
            mid = (lo + hi) // 2
            i = at[mid]  # pods before it; each blocked node holds one at least
            if (i >= sum(n for n, _ in costs) and blockable(costs, prior[i])
                    and (c[3] or cpu_only_blockable(costs, asks[:i, 0], asks[:i, 1]))):
                hi = mid
            else:
                lo = mid + 1
        if lo:
            out[c] = lo
    return out


@dataclass(frozen=True)
class LevelBound:
    """The bound on one arrived level's allocation figure."""

    alloc_pct: float  # at most this, the mean over the level's lines of min(A_i, B_L)
    last_line_pct: float  # B_L: the programme's optimum at the level's last line
    pods: int  # pods arrived by that line
    forced: int


def level_bound(nodes: Sequence[TraceNode], sequence: Sequence[TracePod], level: int = 100) -> LevelBound:
    """The bound on the allocation at `level` % arrived (module docstring),
    over the lines `openb_replay.at_levels` averages."""
    capacity = 1000 * sum(n.gpus for n in nodes)
    arrived = np.cumsum([p.gpu_total for p in sequence])
    at = np.round(100.0 * arrived / capacity)
    lines = (at == level).nonzero()[0]
    if not lines.size:
        lines = (np.abs(at - level) <= 1).nonzero()[0]
    if not lines.size:
        return LevelBound(float("nan"), float("nan"), 0, 0)
    last = int(lines[-1]) + 1
    kinds = {node_type(n) for n in nodes}
    placeable = np.cumsum([p.gpu_total if any(fits_empty(pod_class(p), t) for t in kinds) else 0 for p in sequence])
    forced = forced_counts(nodes, sequence[:last])
    bound = allocation_bound(nodes, sequence[:last], forced)
    per_line = np.minimum(placeable[lines], bound.gpu_milli)
    return LevelBound(float(100.0 * per_line.mean() / capacity), bound.alloc_pct, last, bound.forced)
