"""What learning the typical workload online costs a fragmentation-aware
strategy on the real openb trace: the in-process replay of one arrival
sequence (arrive-only, inflated to 130 %) with the whole trace's workload
known from the start ("oracle"), relearnt from the pods seen every 500 pods
("every 500", the service before), and relearnt after the 1st, 2nd, 4th…
pod and then every N pods (`refresh_due`, the service now, N its
`workload_refresh`: 500 unless `--every` names others). Prints the GPU
allocation at 100 % arrived for each, one row per strategy and seed.

`--variant NAME` replays a stress variant of the trace (`openb_variants`,
generated with each seed) instead of the trace itself.

Run: .venv/bin/python bench/openb_online_workload.py [--strategies fgd fgd-cpu] [--seeds 42]
         [--every 500 2000] [--variant spec35]
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
from tidal_placement import refresh_due

DATA = OPENB
NODES, PODS = DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_default.csv"
REFRESH = 500  # the service's default `workload_refresh`


def schedules(every: list[int]) -> dict:
    """The learning schedules compared, by name (None: the oracle)."""
    return {"oracle": None, "every 500": lambda seen: seen % 500 == 1,
            **{f"doubling, then every {n}": (lambda seen, n=n: refresh_due(seen, n)) for n in every}}


def allocation_at_100(nodes, sequence, name: str, workload, due, rank) -> float:
    """The arrive-only replay with the strategy's workload per `due`."""
    state = R.load_cluster(nodes)
    capacity = int(state.gpu_free[:state.size].sum())
    strategy = make_strategy(name, workload) if due is None else make_strategy("best-fit")
    shapes, arrived, allocated = [], 0, 0
    lines = np.zeros((len(sequence), 4))
    for i, pod in enumerate(sequence):
        arrived += pod.gpu_total
        request = R.pod_request(pod, key=f"{i}:{pod.name}")
        shapes.append(request.shape)
        if due is not None and due(len(shapes)):
            strategy = make_strategy(name, typical_workload(shapes[-5000:]))
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
    parser.add_argument("--variant", choices=list(BY_NAME), default=None, help="a stress variant instead of the trace")
    args = parser.parse_args()
    if min(args.every) < 1:
        parser.error("--every takes periods of 1 pod or more")
    nodes, trace = read_nodes(NODES), read_pods(PODS)
    compared = schedules(args.every)
    print(f"{'strategy':<10}{'seed':>6}" + "".join(f"{name:>28}" for name in compared))
    for seed in args.seeds:
        pods = trace if args.variant is None else generate(trace, nodes, BY_NAME[args.variant], seed=seed)
        workload = typical_workload([p.shape for p in pods])
        sequence = R.arrival_sequence(pods, seed, 1000 * sum(n.gpus for n in nodes), 1.3)
        rank = np.random.default_rng([seed, 7]).permutation(len(nodes))
        for name in args.strategies:
            row = [allocation_at_100(nodes, sequence, name, workload, due, rank) for due in compared.values()]
            print(f"{name:<10}{seed:>6}" + "".join(f"{value:>27.2f}%" for value in row), flush=True)


if __name__ == "__main__":
    main()
