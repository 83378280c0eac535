"""In-process speed of the placement policy core: decide + assume per pod
(a window of pods for `joint`: plan + assume, each pod its share).

Synthetic clusters of 1,000 / 5,000 / 10,000 nodes (1, 2, 4 or 8 NUMA
nodes of 8–32 CPUs, 0–8 GPUs of three models, some nodes without exclusive
CPUs, loads from a NodeScore-like update) and a pod mix shaped like the
openb trace (CPU-only, GPU shares, whole and multi-GPU pods) plus pods
asking exclusive CPUs under spread / single-numa / auto; the pods ask one
of 5 CPU sizes (56 shapes in all), or of `--cpu-values N` sizes for more
distinct shapes. Pods depart in arrival order once the cluster holds
`--live` pods per node, so the cache stays part full; only decide +
assume is timed.

Prints one JSON line per configuration:
{"nodes": N, "mode": "in-process", "strategy": S, "pods_per_s": X, "p50_ms": Y, "p99_ms": Z, …,
 "score_cache_states": states the cached strategy remembers at the end, "score_cache_mib": their arrays}
and, with several strategies, one line per node count with each one's
speed relative to the first (the same cluster and pods, one process:
a ratio holds on a shared machine where absolute rates swing).

Run: .venv/bin/python bench/placement_policy.py [--nodes 1000 5000 10000] [--pods 20000]
     [--strategy S [S …]] [--reference] [--seed 0] [--clock wall|cpu] [--relearn N] [--drift D]
     [--cpu-values N]

`--strategy` defaults to the placement service's default GPU strategy
(`PlacementSettings.gpu_strategy`); `--reference` also runs each cached
strategy's plain version (the same decisions, slower). The strategy learns
its target workload from the pods as the service does (`StrategyLearner`:
after the 1st, 2nd, 4th… pod, then every `--relearn` pods, by default the
service's `workload_refresh`, rebuilt when the shapes drifted by more than
`--drift`, by default its `workload_drift`, and, once built from a full
window, by more than sampling alone moves them; the rebuild itself is not
timed, the decisions after it are); `--relearn 0`, and the plain references, learn
it once from the first 2,000 pods (compare a cached strategy with its
reference with `--relearn 0`: one target for both). `--clock cpu` times
each pod by the CPU time of the thread instead of the wall clock: on a
shared machine, time spent preempted then counts nowhere (a loaded 2-core
machine puts 10–20 ms preemptions into a wall-clock p99).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import tidal_placement
from tidal_placement import ClusterState
from tidal_placement import PodRequest
from tidal_placement import GPU_STRATEGIES, ROW_LOCAL
from tidal_placement import PlacementSettings
from tidal_runtime import collect_oldest_only_when_asked, pad_heap_top
from tidal_simulator.topology_builder import make_topology

MODELS = ("A100", "T4", "V100")
DEFAULT_STRATEGY = PlacementSettings.model_fields["gpu_strategy"].default
RELEARN = PlacementSettings.model_fields["workload_refresh"].default
DRIFT = PlacementSettings.model_fields["workload_drift"].default


def build_cluster(n: int, rng: np.random.Generator, cluster: type = ClusterState) -> ClusterState:
    """`n` synthetic nodes with random NUMA layout, GPUs and loads (in a
    `cluster`: ClusterState, or another commit's, see policy_ab.py)."""
    state = cluster(capacity=n, gpu_cols=8)
    for i in range(n):
        numa = int(rng.choice([1, 2, 4, 8], p=[0.2, 0.4, 0.3, 0.1]))
        per_numa = int(rng.choice([8, 16, 32])) if numa <= 2 else int(rng.choice([8, 16]))
        gpus = int(rng.choice([0, 1, 2, 4, 8], p=[0.3, 0.1, 0.2, 0.2, 0.2]))
        topo = make_topology(f"node-{i:05d}", (per_numa,) * numa, gpus=gpus, model=MODELS[i % 3],
                             memory_mib=8192 * numa * per_numa // 4, exclusive=bool(rng.random() < 0.8))
        state.upsert_node(topo)
        state.update_load(topo.node, {j: float(rng.uniform(0.05, 0.9)) for j in range(numa)})
    return state


CPU_VALUES = (1000, 2000, 4000, 8000, 12000)  # what the pods ask, in milli-CPU (56 shapes in all)


def cpu_values(n: int) -> tuple[int, ...]:
    """The CPU requests pods draw from: CPU_VALUES for 5, else `n` values
    spread evenly over 0.5–30 CPUs (in steps of 100 milli-CPU)."""
    if n == len(CPU_VALUES):
        return CPU_VALUES
    return tuple(sorted({int(round(v, -2)) for v in np.linspace(500, 30000, n)}))


def pod_mix(count: int, rng: np.random.Generator, cpus: tuple[int, ...] = CPU_VALUES,
            request: type = PodRequest) -> list[PodRequest]:
    """Pods shaped like the openb mix, with 10 % exclusive-CPU pods, asking
    CPU from `cpus` (as `request`s: PodRequest, or another commit's)."""
    PodRequest = request  # noqa: N806  (the class the pods are made of)
    pods = []
    for i in range(count):
        kind = rng.choice(["cpu", "exclusive", "share", "one", "multi"], p=[0.25, 0.10, 0.30, 0.30, 0.05])
        cpu = int(rng.choice(cpus))
        mem = int(rng.choice([1024, 4096, 16384]))
        if kind == "cpu":
            pods.append(PodRequest(f"p{i}", cpu, mem))
        elif kind == "exclusive":
            pods.append(PodRequest(f"p{i}", int(rng.choice([2000, 4000, 6000])), mem, True,
                                   str(rng.choice(["spread", "single-numa", "auto"]))))
        elif kind == "share":
            pods.append(PodRequest(f"p{i}", cpu, mem, gpu_count=1, gpu_milli=int(rng.choice([250, 470, 810]))))
        elif kind == "one":
            pods.append(PodRequest(f"p{i}", cpu, mem, gpu_count=1,
                                   gpu_models=(MODELS[i % 3],) if rng.random() < 0.2 else ()))
        else:
            pods.append(PodRequest(f"p{i}", cpu, mem, gpu_count=int(rng.choice([2, 4, 8]))))
    return pods


CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}


def as_placements_process() -> None:
    """Set this process's collector and C heap as `run_service` sets
    placement's: the policy benches time the code as it runs there."""
    collect_oldest_only_when_asked()
    pad_heap_top()


class PolicyRun:
    """One strategy deciding the pod mix on a fresh synthetic cluster, pod
    by pod as the service does: `advance(k)` decides the next `k` pods,
    timing decide + assume of each (`clock`: "wall", or "cpu" for the
    thread's CPU time). The strategy is relearnt every `relearn` pods as
    the service does (0: learnt once) and rebuilt as its `StrategyLearner`
    decides (past `drift`, and past sampling noise once built from a full
    window); pods depart in arrival order past `live_per_node`
    pods a node. `policy`: the placement package deciding (tidal_placement,
    or another commit's copy: policy_ab.py)."""

    def __init__(self, nodes: int, pods: int, strategy_name: str, live_per_node: float, seed: int,
                 reference: bool = False, clock: str = "wall", relearn: int = RELEARN, drift: float = DRIFT,
                 cpus: tuple[int, ...] = CPU_VALUES, policy=tidal_placement):
        self.policy, self.now = policy, CLOCKS[clock]
        rng = np.random.default_rng(seed)
        self.state = build_cluster(nodes, rng, policy.ClusterState)
        self.mix = pod_mix(pods, rng, cpus, policy.PodRequest)
        self.learner = policy.StrategyLearner(strategy_name, relearn, drift) if relearn and not reference else None
        if self.learner is None:
            workload = policy.typical_workload([p.shape for p in self.mix[:2000]])
            self.strategy = policy.make_strategy(strategy_name, workload, reference=reference)
        else:
            self.strategy = self.learner.strategy
        self.live: list[str] = []
        self.cap = int(live_per_node * nodes)
        self.latencies = np.empty(len(self.mix))
        self.done = self.placed = 0
        self.nodes_chosen: list[str | None] = []  # what each decision chose (policy_ab.py compares them)
        self.windows: list[int] = []  # the time of each window decided (one pod each but for `joint`)

    def advance(self, count: int) -> None:
        decide, state, live, now = self.policy.decide_placement, self.state, self.live, self.now
        end = min(self.done + count, len(self.mix))
        while self.done < end:
            if self.learner is not None:
                self.learner.observe_shape(self.mix[self.done].shape)  # the service learns as pods arrive
                self.strategy = self.learner.strategy
            joint = isinstance(self.strategy, tidal_placement.JointStrategy)
            window = self.mix[self.done:min(self.done + (self.strategy.window if joint else 1), end)]
            for pod in window[1:]:
                if self.learner is not None:
                    self.learner.observe_shape(pod.shape)
            one = tidal_placement.per_pod_strategy(self.strategy)
            t0 = now()  # a window decided together is timed whole, each pod its share
            taken = tidal_placement.take_window(state, window, self.strategy, lambda pod: decide(state, pod, one))
            for j, (choice, held) in taken.items():
                if held:
                    self.placed += 1
                    live.append(window[j].key)
            self.latencies[self.done:self.done + len(window)] = (now() - t0) / len(window)
            self.windows.append(now() - t0)
            self.nodes_chosen.extend(taken[j][0].node for j in range(len(window)))
            while len(live) > self.cap:
                state.release(live.pop(0))
            self.done += len(window)


def run(nodes: int, pods: int, strategy_name: str, live_per_node: float, seed: int, reference: bool = False,
        clock: str = "wall", relearn: int = RELEARN, drift: float = DRIFT,
        cpus: tuple[int, ...] = CPU_VALUES) -> dict:
    """Time decide + assume for `pods` pods on a fresh synthetic cluster
    (see PolicyRun)."""
    trial = PolicyRun(nodes, pods, strategy_name, live_per_node, seed, reference, clock, relearn, drift, cpus)
    trial.advance(pods)
    latencies, learner, strategy = trial.latencies, trial.learner, trial.strategy
    total_s = latencies.sum() / 1e9
    cached = tidal_placement.per_pod_strategy(strategy)
    states, score_bytes = cached.memory() if hasattr(cached, "memory") else (0, 0)
    return {"nodes": nodes, "mode": "in-process", "strategy": strategy_name + (" (reference)" if reference else ""),
            "pods_per_s": round(len(trial.mix) / total_s, 1),
            "p50_ms": round(float(np.percentile(latencies, 50)) / 1e6, 4),
            "p99_ms": round(float(np.percentile(latencies, 99)) / 1e6, 4),
            "pods": len(trial.mix), "shapes": len({p.shape for p in trial.mix}), "placed": trial.placed,
            "clock": clock, "relearn": relearn if learner else 0,
            "drift": drift if learner else None, "rebuilds": learner.rebuilds if learner else 1,
            "score_cache_states": states, "score_cache_mib": round(score_bytes / 2**20, 1),
            "window_p99_ms": round(float(np.percentile(trial.windows, 99)) / 1e6, 3),
            "window": max(1, round(len(trial.mix) / max(len(trial.windows), 1)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--strategy", nargs="+", default=[DEFAULT_STRATEGY],
                        help=f"one or more (default: the service's, {DEFAULT_STRATEGY})")
    parser.add_argument("--reference", action="store_true", help="also the plain strategy, without the score cache")
    parser.add_argument("--live", type=float, default=3.0, help="live pods per node before departures start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--relearn", type=int, default=RELEARN,
                        help=f"relearn the target workload every N pods as the service does (default {RELEARN}; "
                             "0: once, from the first 2,000 pods)")
    parser.add_argument("--drift", type=float, default=DRIFT,
                        help=f"rebuild the strategy when the shapes drifted by more than this share, and, once "
                             f"built from a full window, than sampling moves them (default: the service's, "
                             f"{DRIFT:g}; 0: whenever they changed)")
    parser.add_argument("--cpu-values", type=int, default=len(CPU_VALUES),
                        help=f"how many distinct CPU requests the pods draw from (default {len(CPU_VALUES)}: "
                             "1, 2, 4, 8, 12 CPUs; more: spread over 0.5-30 CPUs), for more distinct pod shapes")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="time each pod by the wall clock or by the thread's CPU time (shared machines)")
    args = parser.parse_args()
    as_placements_process()
    unknown = [s for s in args.strategy if s not in GPU_STRATEGIES]
    if unknown:
        parser.error(f"unknown strategy {unknown[0]!r}; known: {', '.join(sorted(GPU_STRATEGIES))}")
    if not 2 <= args.cpu_values <= 296:
        parser.error("--cpu-values takes 2 to 296 (distinct steps of 100 milli-CPU between 0.5 and 30 CPUs)")
    if not 0 <= args.drift <= 1:
        parser.error("--drift takes a share of the pods between 0 and 1")
    runs = [(s, False) for s in args.strategy] + [(s, True) for s in args.strategy if args.reference and s in ROW_LOCAL]
    for n in args.nodes:
        rows = [run(n, args.pods, name, args.live, args.seed, reference, args.clock, args.relearn, args.drift,
                    cpu_values(args.cpu_values))
                for name, reference in runs]
        for row in rows:
            print(json.dumps(row), flush=True)
        if len(rows) > 1:
            first = rows[0]
            print(json.dumps({"nodes": n, "relative_to": first["strategy"], "pods_per_s_ratio": {
                row["strategy"]: round(row["pods_per_s"] / first["pods_per_s"], 3) for row in rows[1:]}}), flush=True)


if __name__ == "__main__":
    main()
