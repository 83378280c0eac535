"""The arrive-only protocol of the FGD paper's simulator (openb METHOD.md §3)
and a replay of it through Tidal's placement core.

Protocol for one seed:
1. sort the trace's pods by name and shuffle them with the seed;
2. inflate: while the total GPU request is below `ratio` × cluster GPU
   capacity, sample a trace pod uniformly with replacement (same RNG) and
   append it as `<name>-tuned-<i>`; stop at the first sample whose *per-GPU*
   milli would pass the target (the simulator's quirk); above the target,
   remove random pods instead;
3. pods arrive in that order and never leave; each is placed or fails.

After every arrival the replay logs the cumulative GPU request of arrived
pods (placed or not), the allocated milli-GPU, and the cluster
fragmentation Σ_n F_n. Per arrived level L (% of capacity):

    alloc(L) = mean over log lines with round(100·arrived/capacity) = L of
               100·allocated/capacity   (±1 when no line is exactly at L)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from tidal_placement import ClusterState
from tidal_placement import decide_placement as decide
from tidal_placement import GpuStrategy, JointStrategy, per_pod_strategy, take_window
from tidal_placement import FragModel
from .openb import TraceNode, TracePod, node_topology, pod_request

LEVELS = tuple(range(50, 131, 5))


def arrival_sequence(pods: Sequence[TracePod], seed: int, capacity_milli: int, ratio: float = 1.3) -> list[TracePod]:
    """The shuffled, inflated (or trimmed) arrival order for `seed`."""
    rng = np.random.default_rng(seed)
    ordered = sorted(pods, key=lambda p: p.name)
    out = [ordered[i] for i in rng.permutation(len(ordered))]
    total, target = sum(p.gpu_total for p in ordered), ratio * capacity_milli
    if total == 0:
        return out
    if total > target:
        while total > target and out:
            total -= out.pop(int(rng.integers(len(out)))).gpu_total
        return out
    i = 0
    while total < target:  # may end above the target: the check uses per-GPU milli
        pod = ordered[int(rng.integers(len(ordered)))]
        if total + pod.gpu_milli > target:
            break
        total += pod.gpu_total
        out.append(replace(pod, name=f"{pod.name}-tuned-{i}"))
        i += 1
    return out


@dataclass(frozen=True)
class ReplayLog:
    """One line per arrival: cumulative arrived GPU request, allocated GPU,
    fragmented and idle GPU (all milli), whether the pod was placed."""

    capacity_milli: int
    arrived: np.ndarray
    allocated: np.ndarray
    frag: np.ndarray
    idle: np.ndarray
    placed: np.ndarray


def load_cluster(nodes: Iterable[TraceNode]) -> ClusterState:
    """A scheduler cache holding the trace's nodes."""
    nodes = list(nodes)
    state = ClusterState(capacity=max(len(nodes), 1), gpu_cols=max([n.gpus for n in nodes] + [1]))
    for node in nodes:
        state.upsert_node(node_topology(node))
    return state


def replay(nodes: Sequence[TraceNode], sequence: Sequence[TracePod], strategy: GpuStrategy, frag: FragModel,
           rng: np.random.Generator | None = None, rank: np.ndarray | None = None) -> ReplayLog:
    """Place `sequence` in order on a fresh cluster of `nodes` (nothing
    departs); final ties by `rank` (per node, in `nodes` order) or `rng`.

    A joint strategy decides the arrivals in windows of its size, each
    window once its last pod has arrived (the protocol change: decisions
    per window, not per arrival). Line i still counts what pods 0..i hold,
    so the curves compare with the per-pod protocol's; its fragmentation is
    the cluster's after the window."""
    state = load_cluster(nodes)
    n, models = state.size, tuple(state.models)
    node_frag = frag.node_frag(state.cpu_free[:n], state.gpu_free[:n], state.gpu_model[:n], models)
    capacity = int(state.gpu_free[:n].sum())
    lines = np.zeros((len(sequence), 4), dtype=np.float64)
    placed = np.zeros(len(sequence), dtype=bool)
    one = per_pod_strategy(strategy)
    size = strategy.window if isinstance(strategy, JointStrategy) else 1
    arrived = allocated = 0
    for start in range(0, len(sequence), size):
        requests = [pod_request(pod, key=f"{i}:{pod.name}") for i, pod in enumerate(sequence[start:start + size], start)]
        taken = take_window(state, requests, strategy, lambda request: decide(state, request, one, rng=rng, rank=rank))
        for j, (choice, held) in taken.items():
            if held:
                placed[start + j] = True
                r = choice.row
                node_frag[r] = frag.node_frag(state.cpu_free[r:r + 1], state.gpu_free[r:r + 1],
                                              state.gpu_model[r:r + 1], models)[0]
        for i in range(start, start + len(requests)):
            arrived += sequence[i].gpu_total
            allocated += sequence[i].gpu_total if placed[i] else 0
            lines[i] = (arrived, allocated, node_frag.sum(), capacity - allocated)
    return ReplayLog(capacity, lines[:, 0], lines[:, 1], lines[:, 2], lines[:, 3], placed)


def at_levels(log: ReplayLog, values: np.ndarray, levels: Sequence[int] = LEVELS) -> dict[int, float]:
    """Mean of `values` (one per log line) at each arrived level, as the
    authors' `merge_alloc_discrete.py` averages it; NaN where no line is near."""
    level = np.round(100.0 * log.arrived / log.capacity_milli)
    out = {}
    for target in levels:
        pick = level == target
        if not pick.any():
            pick = np.abs(level - target) <= 1
        out[target] = round(float(values[pick].mean()), 2) if pick.any() else float("nan")
    return out


def alloc_curve(log: ReplayLog, levels: Sequence[int] = LEVELS) -> dict[int, float]:
    """GPU allocation ratio (% of capacity) per arrived level."""
    return at_levels(log, 100.0 * log.allocated / log.capacity_milli, levels)


def frag_curve(log: ReplayLog, levels: Sequence[int] = LEVELS) -> dict[int, float]:
    """Fragmented GPU as % of capacity per arrived level."""
    return at_levels(log, 100.0 * log.frag / log.capacity_milli, levels)


def frag_ratio_curve(log: ReplayLog, levels: Sequence[int] = LEVELS) -> dict[int, float]:
    """Fragmented GPU as % of idle GPU per arrived level."""
    ratio = np.divide(100.0 * log.frag, log.idle, out=np.zeros_like(log.frag), where=log.idle > 0)
    return at_levels(log, ratio, levels)
