"""The openb allocation bound (issue 56): on tiny clusters it is at least
the best of every run the protocol allows (found by brute force), its
forced pods are placed by every such run, its level figure bounds the
metric as the replay computes it, and hand-made instances whose exact
value is known come out exact."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from tidal_placement import FragModel, typical_workload
from tidal_placement.gpu_strategies import make_strategy
from tidal_simulator.openb import TraceNode, TracePod, read_nodes, read_pods
from tidal_simulator.openb_bound import (allocation_bound, cpu_only_blockable, blocking_costs, forced_counts,
                                         level_bound, pod_class)
from tidal_simulator.openb_replay import ReplayLog, arrival_sequence, at_levels, replay
from collections import Counter

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "openb_sample"


def options(state, pod: TracePod, nodes):
    """Every distinct way `pod` fits the cluster state (one per node and GPU choice)."""
    out = []
    for n, (cpu, mem, gpus) in enumerate(state):
        node = nodes[n]
        if pod.cpu_milli > cpu or pod.memory_mib > mem:
            continue
        if pod.num_gpu and pod.gpu_spec and node.model not in pod.gpu_spec:
            continue
        if not pod.num_gpu:
            picks = [gpus]
        elif pod.num_gpu == 1 and pod.gpu_milli < 1000:
            picks = [gpus[:g] + (gpus[g] - pod.gpu_milli,) + gpus[g + 1:]
                     for g in sorted({g for g in range(len(gpus)) if gpus[g] >= pod.gpu_milli}, key=lambda g: gpus[g])]
        else:
            whole = [g for g in range(len(gpus)) if gpus[g] == 1000][:pod.num_gpu]
            picks = [tuple(0 if g in whole else f for g, f in enumerate(gpus))] if len(whole) == pod.num_gpu else []
        for new in dict.fromkeys(picks):
            out.append(state[:n] + ((cpu - pod.cpu_milli, mem - pod.memory_mib, new),) + state[n + 1:])
    return out


def runs(nodes, sequence):
    """Every run of the protocol: (placed flags, GPU placed per line). A pod
    that fits somewhere is placed (each way tried); one that fits nowhere is skipped."""
    start = tuple((n.cpu_milli, n.memory_mib, (1000,) * n.gpus) for n in nodes)

    def go(i, state, placed, lines):
        if i == len(sequence):
            yield placed, lines
            return
        pod, ways = sequence[i], options(state, sequence[i], nodes)
        if not ways:
            yield from go(i + 1, state, placed + (False,), lines + ((lines[-1] if lines else 0),))
        for new in ways:
            yield from go(i + 1, new, placed + (True,), lines + ((lines[-1] if lines else 0) + pod.gpu_total,))
    yield from go(0, start, (), ())


def tiny(seed: int):
    rng = random.Random(seed)
    nodes = [TraceNode(f"n{i}", rng.choice([4000, 8000]), rng.choice([4096, 8192]), rng.choice([1, 2]),
                       rng.choice(["A", "B"])) for i in range(rng.choice([1, 2, 3]))]
    pods = []
    for i in range(rng.choice([4, 5, 6])):
        if pods and rng.random() < 0.3:  # a pod of a class already seen: shares stacking, forced prefixes
            pods.append(TracePod(f"p{i}", *[getattr(pods[-1], f) for f in ("cpu_milli", "memory_mib", "num_gpu",
                                                                           "gpu_milli", "gpu_spec")]))
            continue
        count = rng.choice([0, 0, 1, 1, 2])
        milli = rng.choice([250, 500, 1000]) if count == 1 else (1000 if count else 0)
        pods.append(TracePod(f"p{i}", rng.choice([1000, 2000, 3000, 6000]), rng.choice([1024, 3072, 6144]), count,
                             milli, rng.choice([(), (), ("A",)]) if count else ()))
    return nodes, pods


@pytest.mark.parametrize("seed", range(120))
def test_the_bound_holds_every_run_the_protocol_allows_and_every_forced_pod_is_placed(seed):
    nodes, sequence = tiny(seed)
    forced = forced_counts(nodes, sequence)
    bound = allocation_bound(nodes, sequence, forced)
    first = {}  # class → its first `forced` arrivals, which every run must place
    for i, p in enumerate(sequence):
        first.setdefault(pod_class(p), []).append(i)
    must = [i for c, at in first.items() for i in at[:forced.get(c, 0)]]
    best = 0
    capacity = 1000 * sum(n.gpus for n in nodes)
    arrived = np.cumsum([p.gpu_total for p in sequence]).astype(float)
    level = int(np.round(100.0 * arrived[-1] / capacity)) if capacity else 0
    levels = level_bound(nodes, sequence, level) if capacity and arrived[-1] else None
    for placed, lines in runs(nodes, sequence):
        assert all(placed[i] for i in must), (must, placed)
        best = max(best, lines[-1])
        if levels is not None:  # the level figure as the replay computes it
            log = ReplayLog(capacity, arrived, np.array(lines, dtype=float), np.zeros(len(lines)),
                            np.zeros(len(lines)), np.array(placed))
            figure = at_levels(log, 100.0 * log.allocated / capacity, (level,))[level]
            assert figure <= levels.alloc_pct + 0.01
    assert bound.gpu_milli >= best - 1e-6


def test_a_cpu_pod_that_fits_is_placed_and_strands_the_gpu_pod_after_it():
    nodes = [TraceNode("a", 8000, 65536, 1, "T4")]
    sequence = [TracePod("cpu", 6000, 1024, 0, 0), TracePod("gpu", 4000, 1024, 1, 1000)]
    # free to skip the CPU pod, the programme would place the GPU pod: 1000
    assert allocation_bound(nodes, sequence).gpu_milli == pytest.approx(1000.0)
    # but it fits the empty node, so it is placed: 2000 CPU left, the GPU pod cannot fit, exactly 0
    assert forced_counts(nodes, sequence) == Counter({pod_class(sequence[0]): 1})
    assert level_bound(nodes, sequence, 100).last_line_pct == pytest.approx(0.0)


def test_pods_counted_whole_and_one_per_node_force_what_totals_do_not():
    nodes = [TraceNode(f"n{i}", 8000, 8000, 1, "T4") for i in range(2)]
    big = lambda name: TracePod(name, 7000, 7000, 0, 0)  # noqa: E731
    sequence = [big("a"), big("b"), TracePod("p", 1000, 1000, 0, 0), TracePod("g", 1500, 500, 1, 1000)]
    # b: one pod before it cannot block two nodes; p: a and b leave each node 1000 CPU and memory, and
    # blocking both needs 7001 of CPU on one and of memory on the other from two (7000, 7000) pods
    forced = forced_counts(nodes, sequence)
    assert forced[pod_class(sequence[0])] == 2 and forced[pod_class(sequence[2])] == 1
    costs = blocking_costs(pod_class(sequence[2]), Counter((n.model, 1, 8000, 8000) for n in nodes), 1000)
    assert not cpu_only_blockable(costs, np.array([7000.0, 7000.0]), np.array([7000.0, 7000.0]))
    assert cpu_only_blockable(costs, np.array([7001.0, 100.0]), np.array([100.0, 7001.0]))
    # 15,000 of 16,000 CPU taken: g (1,500) fits nowhere; every run places 0, and so does the bound
    assert allocation_bound(nodes, sequence, forced).gpu_milli == pytest.approx(0.0)
    assert max(lines[-1] for _, lines in runs(nodes, sequence)) == 0


def test_shares_of_one_class_stack_on_one_gpu():
    nodes = [TraceNode("a", 8000, 65536, 1, "T4")]
    sequence = [TracePod(f"s{i}", 1000, 1024, 1, 250) for i in range(5)]
    # four shares of 250 fill the GPU; not one pod a GPU (a bound so made was below the truth)
    assert allocation_bound(nodes, sequence).gpu_milli == pytest.approx(1000.0)
    assert max(lines[-1] for _, lines in runs(nodes, sequence)) == 1000


def test_the_level_figure_averages_the_lines_as_the_replay_does():
    nodes = [TraceNode("a", 64000, 65536, 4, "T4")]
    sequence = [TracePod(f"p{i}", 1000, 1024, 1, 1000) for i in range(5)]
    # lines at 25, 50, 75, 100, 125 %: level 100 is line 3 alone, 4 GPUs arrived and placeable
    assert level_bound(nodes, sequence, 100).alloc_pct == pytest.approx(100.0)
    assert level_bound(nodes, sequence, 75).alloc_pct == pytest.approx(75.0)  # what had arrived by then
    assert level_bound(nodes, sequence, 125).alloc_pct == pytest.approx(100.0)


def test_the_level_bound_holds_every_strategy_on_the_sample():
    nodes, pods = read_nodes(SAMPLE / "node_list.csv"), read_pods(SAMPLE / "pod_list.csv")
    workload = typical_workload([p.shape for p in pods])
    capacity = 1000 * sum(n.gpus for n in nodes)
    checked = 0
    for seed in (0, 1):
        sequence = arrival_sequence(pods, seed, capacity, 1.3)
        bounds = {}
        for name, options in (("fgd-cpu", {}), ("best-fit", {}), ("joint", {"window": 4})):
            log = replay(nodes, sequence, make_strategy(name, workload, **options), FragModel(workload))
            for level, figure in at_levels(log, 100.0 * log.allocated / capacity, range(0, 131)).items():
                if not np.isnan(figure):  # the sample's few pods reach some levels only
                    bound = bounds.get(level) or bounds.setdefault(level, level_bound(nodes, sequence, level))
                    assert figure <= bound.alloc_pct + 0.01 and bound.alloc_pct <= bound.last_line_pct + 1e-9
                    checked += 1
    assert checked >= 6
