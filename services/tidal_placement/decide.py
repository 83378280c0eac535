"""One placement decision over the scheduler cache (SPEC §A, §B, §E).

1. Filter nodes (vectorised; nodes counted out per reason): present and
   not blocked (counted under the reason it takes no new pods: a taint,
   "stale: no metrics for 30s"), node CPU and memory free ≥ request
   (allocatable may be oversold), the exclusive-CPU capability, GPU model,
   enough GPU room (whole free devices, or one device with ≥ the share; per
   device when a kind, a §B group mask or a mixed-model node is involved;
   whole GPUs from distinct physical GPUs, see `device_budget`),
   then whether the §A per-NUMA distribution is possible (exclusive pods).
   Every filter comes before any score, as in kube-scheduler: a score
   normalised over the candidates (quantised best-fit) sees only nodes
   that fit.
2. Rank: a GPU pod (or any pod when the strategy scores CPU-only pods) by
   the GPU strategy's cost, then its tiebreaks; then the §E NUMA score
   (lowest first) — for exclusive pods the §A distribution's. Remaining
   ties go to the lowest `rank` (a per-node order), or uniformly at random
   with `rng` (as kube-scheduler), else to the lowest row. Without a GPU
   strategy, CPU-only pods are ranked by §E alone. A score cache gives the
   cost and tiebreaks per node state (`StateScores`): they are compared
   over the distinct states among the candidates, hundreds where the
   candidates are thousands, and only the tied states' rows go on to §E.
3. Name the NUMA CPUs (`distribute` on the chosen node, as
   `numa_lookup.exclusive_take` computes it) and concrete GPUs:
   the allocation to `assume`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import numpy as np
from tidal_schemas import filters as F

from .cluster_state import Allocation, ClusterState
from .device_budget import distinct_roots, one_per_root
from .gpu_candidates import GPU_MILLI, Candidates, GpuStrategy, Scored, StateScores, is_share
from .gpu_workload import Shape
from .numa_lookup import (exclusive_feasible, exclusive_scores, exclusive_take, shared_numa_least,
                          shared_numa_scores, shared_numa_take)
from .pod_request import Placement, PodRequest
from .ranking import Ranked, runners_up, runners_up_of_states, select, tied_states

__all__ = ["Placement", "PodRequest", "decide", "eligible_gpus", "node_fit", "shared_numa_scores"]


def decide(state: ClusterState, pod: PodRequest, strategy: GpuStrategy | None = None, *,
           rng: np.random.Generator | None = None, rank: np.ndarray | None = None,
           allowed: np.ndarray | None = None, nodes: np.ndarray | None = None) -> Placement:
    """Choose a node, NUMA CPUs and GPUs for `pod`. Final ties go to the
    lowest `rank[row]` (default: the row), or uniformly at random with
    `rng`. `allowed` optionally limits the GPU devices usable (rows ×
    device columns, e.g. a §B group), `nodes` the rows (a tenant's
    permitted nodes)."""
    n, shape = state.size, pod.shape
    stages = _host_stages(state, pod, n, nodes)
    eligible = None
    if pod.gpu_count:
        need = pod.gpu_milli if is_share(shape) else GPU_MILLI
        if pod.gpu_kind or allowed is not None or (pod.gpu_models and state.mixed_model_rows):
            eligible = eligible_gpus(state, pod, allowed, n)  # per device
            fit = eligible & (state.gpu_free[:n] >= need)
            # whole GPUs for one pod come from distinct physical GPUs (device_budget)
            room = np.count_nonzero(fit, axis=1) if is_share(shape) else distinct_roots(fit, state.gpu_root[:n])
            stages.append((F.GPU, room >= pod.gpu_count))
        else:  # every node's GPUs share its model: node-level figures suffice
            if pod.gpu_models:
                table = np.array([m in pod.gpu_models for m in state.models] + [False])
                stages.append((F.GPU_MODEL, table.take(state.gpu_model[:n])))  # id -1 (no GPU) hits the False pad
            stages.append((F.GPU, state.gpu_max[:n] >= need if is_share(shape) else state.gpu_whole[:n] >= pod.gpu_count))
    cpus = pod.cpu_milli // 1000
    if pod.exclusive_cpus:
        stages.append((F.NUMA, exclusive_feasible(state, pod.cpu_policy, cpus)))
    left = present_count = len(state.rows)  # the nodes known: the rows present
    # nodes counted out, by the reasons that counted any; with every row present, the first stage's mask is the start
    keep, filtered = None if present_count == n else state.present[:n], {}
    for reason, mask in stages:
        keep = mask if keep is None else keep & mask
        now = int(np.count_nonzero(keep))
        if now != left:
            filtered[reason], left = left - now, now
    rows = keep.nonzero()[0]
    if not rows.size:
        return Placement(False, _why(filtered, present_count), filtered=filtered)
    keys: list[np.ndarray] = []
    scored: Scored | StateScores | None = None
    if strategy is not None and (pod.gpu_count or strategy.scores_cpu_pods):
        candidates = Candidates(state, rows, eligible)
        by_state = getattr(strategy, "score_states", None)  # see gpu_candidates
        scored = by_state(candidates, shape) if by_state else None
        if scored is None:
            scored = strategy.score(candidates, shape)
            keys = [scored.cost, *scored.tiebreaks]
    need_cpus = -(-pod.cpu_milli // 1000)

    def numa_key(idx: np.ndarray) -> np.ndarray:
        sub = rows if len(idx) == len(rows) else rows.take(idx)
        if pod.exclusive_cpus:
            return exclusive_scores(state, pod.cpu_policy, cpus, sub)
        return shared_numa_scores(state, sub, need_cpus)

    def shared_least(idx: np.ndarray) -> np.ndarray:
        return shared_numa_least(state, rows if len(idx) == len(rows) else rows.take(idx), need_cpus)

    numa_least = None if pod.exclusive_cpus else shared_least  # exclusive pods: select ranks by numa_key
    ranks = None if rank is None else rank[rows]
    if isinstance(scored, StateScores):  # the states' keys narrow the candidates to one state's rows or a few
        tied, cheapest = tied_states(scored)
        i = select(len(rows), [], numa_key, rng, ranks, tied=tied, numa_least=numa_least)
        sid = int(scored.sids[i])
        cost, device = float(scored.cost[sid]), None if scored.device is None else scored.device[sid]
        ranked = partial(runners_up_of_states, scored, i, cheapest)
    else:
        ranking: list[np.ndarray] = []  # select leaves here the first key it ranked every candidate by, and its ties
        i = select(len(rows), keys, numa_key, rng, ranks, ranking, numa_least=numa_least)
        cost = float(keys[0][i]) if keys else None
        device = None if scored is None or scored.device is None else scored.device[i]
        ranked = partial(runners_up, *ranking, i) if ranking else tuple
    r = int(rows[i])
    # Runners-up are for explanation only: computed when the decision event is
    # built, not here, so they cost nothing on the decision path.
    runners = partial(_named, state, rows, ranked)
    if pod.exclusive_cpus:
        numa_cpus, numa = exclusive_take(state, pod.cpu_policy, cpus, r)
        numa_nodes = tuple(sorted(numa_cpus))
    else:
        numa_cpus = {}
        numa, numa_nodes = shared_numa_take(state, r, need_cpus)
    gpus = _gpus(state, r, pod, shape, eligible, device)
    allocation = Allocation.of(state.names[r], pod.cpu_milli, pod.memory_mib, numa_cpus, gpus)
    return Placement(True, node=state.names[r], row=r, allocation=allocation, numa_nodes=numa_nodes,
                     cost=numa if cost is None else cost, numa_score=numa, candidates=int(rows.size),
                     filtered=filtered, runners_up=runners)


def _named(state: ClusterState, rows: np.ndarray, ranked: Callable[[], Ranked]
           ) -> tuple[tuple[str, float], ...]:
    # the runners-up by node name
    return tuple((state.names[int(rows[j])], value) for j, value in ranked())


def _gpus(state: ClusterState, r: int, pod: PodRequest, shape: Shape, eligible: np.ndarray | None,
          device: int | None) -> dict[str, int]:
    if not pod.gpu_count:
        return {}
    if device is not None and device >= 0:
        return {state.gpu_id(r, int(device)): pod.gpu_milli}
    ok_row = eligible[r] if eligible is not None else state.gpu_valid[r]
    if is_share(shape):
        options = (ok_row & (state.gpu_free[r] >= pod.gpu_milli)).nonzero()[0]
        picks = [int(options[np.argmin(state.gpu_free[r, options])])]  # the fullest that fits
    else:  # the lowest whole free devices, never two of one physical GPU
        whole = (ok_row & (state.gpu_free[r] == GPU_MILLI)).nonzero()[0]
        picks = one_per_root(whole, state.gpu_root[r], pod.gpu_count)
    return {state.gpu_id(r, g): pod.gpu_milli for g in picks}


# The node filters on everything but GPUs, in order: name -> rows kept (None:
# the filter does not apply to this pod). The names are the shared vocabulary
# (`tidal_schemas.filters`) the metrics and the bridge's messages read.
HostFilter = Callable[[ClusterState, PodRequest, int], "np.ndarray | None"]
HOST_FILTERS: dict[str, HostFilter] = {
    F.CPU: lambda state, pod, n: state.cpu_free[:n] >= pod.cpu_milli,
    F.MEMORY: lambda state, pod, n: state.mem_free[:n] >= pod.memory_mib,
    F.NO_EXCLUSIVE_CPUS: lambda state, pod, n: state.exclusive_ok[:n] if pod.exclusive_cpus else None,
}
# and after them, for GPU pods and exclusive CPUs (decide's own stages):
LATER_FILTERS = (F.GPU_MODEL, F.GPU, F.NUMA)


def _host_stages(state: ClusterState, pod: PodRequest, n: int,
                 nodes: np.ndarray | None) -> list[tuple[str, np.ndarray]]:
    """The filter stages on everything but GPUs, as (reason, rows kept):
    the tenant's permitted nodes, nodes taking no new pods, then HOST_FILTERS."""
    stages = [] if nodes is None else [(F.NOT_PERMITTED, nodes[:n])]
    stages += state.blocked_masks(n)
    for name, keep in HOST_FILTERS.items():
        mask = keep(state, pod, n)
        if mask is not None:
            stages.append((name, mask))
    return stages


def node_fit(state: ClusterState, pod: PodRequest, nodes: np.ndarray | None = None) -> np.ndarray:
    """The rows (of `state.size`) that fit `pod` but for its GPUs: present,
    taking pods, in `nodes` if given, CPU and memory free, and for
    exclusive pods a possible §A distribution. `decide` filters the same
    way; a §B group choice uses this to pick only nodes that fit the pod."""
    n = state.size
    keep = state.present[:n].copy()
    for _, mask in _host_stages(state, pod, n, nodes):
        keep &= mask
    if pod.exclusive_cpus:
        keep &= exclusive_feasible(state, pod.cpu_policy, pod.cpu_milli // 1000)
    return keep


def eligible_gpus(state: ClusterState, pod: PodRequest, allowed: np.ndarray | None = None,
                  n: int | None = None) -> np.ndarray:
    """The GPU devices (first `n` rows × device columns) `pod` may use:
    healthy, of one of its models and its kind, and in `allowed` if given."""
    n = state.size if n is None else n
    ok = state.gpu_valid[:n].copy()
    if pod.gpu_models:
        table = np.array([m in pod.gpu_models for m in state.models] + [False])
        ok &= table[np.where(state.gpu_dev_model[:n] < 0, len(state.models), state.gpu_dev_model[:n])]
    if pod.gpu_kind:
        ok &= state.gpu_virtual[:n] == (pod.gpu_kind == "virtual")
    if allowed is not None:
        ok &= allowed[:n]
    return ok


def _why(filtered: Mapping[str, int], present: int) -> str:
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(filtered.items(), key=lambda kv: -kv[1]))
    return f"0/{present} nodes fit" + (f": {parts}" if parts else "")
