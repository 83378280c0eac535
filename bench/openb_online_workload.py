"""What learning the typical workload online costs a fragmentation-aware
strategy on the real openb trace: the in-process replay of one arrival
sequence (arrive-only, inflated to 130 %) with the whole trace's workload
known from the start ("oracle"), relearnt from the pods seen every 500 pods
("every 500", the service before), and relearnt after the 1st, 2nd, 4th…
pod and then every 500 (`refresh_due`, the service now). Prints the GPU
allocation at 100 % arrived for each.

Run: .venv/bin/python bench/openb_online_workload.py [--strategies fgd fgd-cpu] [--seed 42]
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
from tidal_placement import refresh_due

DATA = OPENB
NODES, PODS = DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_default.csv"
SCHEDULES = {
    "oracle": None,
    "every 500": lambda seen: seen % 500 == 1,
    "doubling, then every 500": lambda seen: refresh_due(seen, 500),
}


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
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    nodes, pods = read_nodes(NODES), read_pods(PODS)
    workload = typical_workload([p.shape for p in pods])
    sequence = R.arrival_sequence(pods, args.seed, 1000 * sum(n.gpus for n in nodes), 1.3)
    rank = np.random.default_rng([args.seed, 7]).permutation(len(nodes))
    print(f"{'strategy':<10}" + "".join(f"{name:>26}" for name in SCHEDULES))
    for name in args.strategies:
        row = [allocation_at_100(nodes, sequence, name, workload, due, rank) for due in SCHEDULES.values()]
        print(f"{name:<10}" + "".join(f"{value:>25.2f}%" for value in row), flush=True)


if __name__ == "__main__":
    main()
