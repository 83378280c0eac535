"""What learning the typical workload online costs a fragmentation-aware
strategy on the real openb trace: the in-process replay of one arrival
sequence (arrive-only, inflated to 130 %) with the whole trace's workload
known from the start ("oracle"), relearnt from the pods seen every 500 pods
("every 500", the service before), and relearnt after the 1st, 2nd, 4th…
pod and then every N pods as the service does (its own
`StrategyLearner`, N its `workload_refresh`: 500 unless `--every` names
others), the strategy rebuilt only when the shapes seen drifted by more
than a tolerance (its `workload_drift` unless `--tolerance` names others;
0: whenever they changed). Prints the GPU allocation at 100 % arrived for
each, one row per strategy and seed, and how often each rebuilt.

`--variant NAME` replays a stress variant of the trace (`openb_variants`,
generated with each seed) instead of the trace itself.

Run: .venv/bin/python bench/openb_online_workload.py [--strategies fgd fgd-cpu] [--seeds 42]
         [--every 500 2000] [--tolerance 0 0.05] [--variant spec35]
"""

from __future__ import annotations

import argparse

from _paths import OPENB

import numpy as np

from tidal_simulator import openb_replay as R
from tidal_placement import decide_placement as decide
from tidal_placement import make_strategy
from tidal_placement import typical_workload
from tidal_simulator.openb import read_nodes, read_pods
from tidal_simulator.openb_variants import BY_NAME, generate
from tidal_placement import PlacementSettings, StrategyLearner

DATA = OPENB
NODES, PODS = DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_default.csv"
SETTINGS = PlacementSettings.model_fields
REFRESH = SETTINGS["workload_refresh"].default  # the service's defaults
TOLERANCE = SETTINGS["workload_drift"].default


class Every500:
    """The service before: relearnt from the first pod, then every 500 pods."""

    def __init__(self, name: str) -> None:
        self.name, self.shapes, self.rebuilds = name, [], 0
        self.strategy = make_strategy("best-fit")

    def observe_shape(self, shape) -> None:
        self.shapes.append(shape)
        if len(self.shapes) % 500 == 1:
            self.strategy = make_strategy(self.name, typical_workload(self.shapes[-5000:]))
            self.rebuilds += 1


class Oracle:
    """The whole trace's workload known from the start."""

    def __init__(self, name: str, workload) -> None:
        self.strategy, self.rebuilds = make_strategy(name, workload), 0

    def observe_shape(self, shape) -> None:
        pass


def schedules(every: list[int], tolerances: list[float]) -> dict:
    """The learning schedules compared, by name: each makes a learner for a strategy and the trace's workload."""
    return {"oracle": Oracle, "every 500": lambda name, _: Every500(name),
            **{f"every {n}, drift > {t:g}": (lambda name, _, n=n, t=t: StrategyLearner(name, n, t))
               for n in every for t in tolerances}}


def allocation_at_100(nodes, sequence, learner, rank) -> float:
    """The arrive-only replay with the strategy `learner` gives after each pod."""
    state = R.load_cluster(nodes)
    capacity = int(state.gpu_free[:state.size].sum())
    arrived, allocated = 0, 0
    lines = np.zeros((len(sequence), 4))
    for i, pod in enumerate(sequence):
        arrived += pod.gpu_total
        request = R.pod_request(pod, key=f"{i}:{pod.name}")
        learner.observe_shape(request.shape)  # as the service: learnt before the pod is tried
        strategy = learner.strategy
        choice = decide(state, request, strategy, rank=rank)
        if choice.ok and state.assume(request.key, choice.allocation).ok:
            allocated += pod.gpu_total
        lines[i] = (arrived, allocated, 0, capacity - allocated)
    log = R.ReplayLog(capacity, lines[:, 0], lines[:, 1], lines[:, 2], lines[:, 3], np.zeros(len(sequence), bool))
    return R.alloc_curve(log)[100]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=["fgd", "fgd-cpu"])
    parser.add_argument("--seeds", "--seed", nargs="+", type=int, default=[42])
    parser.add_argument("--every", nargs="+", type=int, default=[REFRESH],
                        help="the refresh periods compared after the doubling start (default: the service's)")
    parser.add_argument("--tolerance", nargs="+", type=float, default=[TOLERANCE],
                        help=f"the drifts tolerated before a rebuild (default: the service's, {TOLERANCE:g})")
    parser.add_argument("--variant", choices=list(BY_NAME), default=None, help="a stress variant instead of the trace")
    args = parser.parse_args()
    if min(args.every) < 1:
        parser.error("--every takes periods of 1 pod or more")
    if not all(0 <= t <= 1 for t in args.tolerance):
        parser.error("--tolerance takes shares of the pods between 0 and 1")
    nodes, trace = read_nodes(NODES), read_pods(PODS)
    compared = schedules(args.every, args.tolerance)
    print(f"{'strategy':<10}{'seed':>6}" + "".join(f"{name:>32}" for name in compared))
    for seed in args.seeds:
        pods = trace if args.variant is None else generate(trace, nodes, BY_NAME[args.variant], seed=seed)
        workload = typical_workload([p.shape for p in pods])
        sequence = R.arrival_sequence(pods, seed, 1000 * sum(n.gpus for n in nodes), 1.3)
        rank = np.random.default_rng([seed, 7]).permutation(len(nodes))
        for name in args.strategies:
            learners = [make(name, workload) for make in compared.values()]
            row = [allocation_at_100(nodes, sequence, learner, rank) for learner in learners]
            print(f"{name:<10}{seed:>6}" + "".join(f"{value:>20.2f}% ({learner.rebuilds:>4} built)"
                                                   for value, learner in zip(row, learners)), flush=True)


if __name__ == "__main__":
    main()
