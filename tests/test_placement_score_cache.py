"""The score cache changes speed, never decisions: openb pods replayed through
the plain strategy (the reference) and the cached one, every decision
compared — node, GPUs, cost — with pods leaving on the way so node states
recur, and the cache's own rules (identical nodes share one state, a
changed node gets its new state, candidates with their own devices pass
through)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.decide import PodRequest, decide
from tidal_placement.gpu_candidates import Candidates
from tidal_placement.gpu_score_cache import ScoreCache
from tidal_placement.ranking import tied_states
from tidal_placement.gpu_strategies import make_strategy
from tidal_placement.gpu_workload import Shape, TargetWorkload, typical_workload
from tidal_simulator.openb import pod_request, read_nodes, read_pods
from tidal_simulator.openb_replay import arrival_sequence, load_cluster
from tidal_simulator.openb_variants import BY_NAME, generate
from tidal_simulator.topology_builder import make_topology
from tidal_schemas import Resources

OPENB = Path(__file__).resolve().parents[1] / "data" / "openb"
NODES = read_nodes(OPENB / "openb_node_list_gpu_node.csv")
BASE = read_pods(OPENB / "openb_pod_list_default.csv")


def decisions(strategy, pods, rank, leave_every: int) -> list[tuple]:
    """Place `pods` in order on a fresh openb cluster; every `leave_every`-th
    placed pod leaves again right after the next decision."""
    state, placed, out = load_cluster(NODES), [], []
    for i, pod in enumerate(pods):
        request = pod_request(pod, key=f"{i}")
        choice = decide(state, request, strategy, rank=rank)
        out.append((choice.ok, choice.node, choice.allocation.gpus if choice.ok else None, choice.cost,
                    choice.reason, choice.numa_nodes, choice.candidates, dict(choice.filtered), choice.runners_up()))
        if choice.ok and state.assume(request.key, choice.allocation).ok:
            placed.append(request.key)
            if len(placed) % leave_every == 0:
                state.release(placed[-2])
    return out


@pytest.mark.parametrize("name", ["fgd", "fgd-cpu"])
@pytest.mark.parametrize("variant", ["default", "spec35"])
def test_cached_and_reference_decide_alike(name, variant):
    pods = BASE if variant == "default" else generate(BASE, NODES, BY_NAME[variant], seed=1)
    workload = typical_workload([p.shape for p in pods])
    sequence = arrival_sequence(pods, seed=1, capacity_milli=1000 * sum(n.gpus for n in NODES))[:400]
    rank = np.random.default_rng([1, 7]).permutation(len(NODES))
    reference = decisions(make_strategy(name, workload, reference=True), sequence, rank, leave_every=5)
    cached = decisions(make_strategy(name, workload), sequence, rank, leave_every=5)
    assert sum(ok for ok, *_ in reference) > 350  # the replay did place pods
    assert [i for i, (a, b) in enumerate(zip(reference, cached)) if a != b] == []


def mixed_cluster(rng: np.random.Generator, n: int = 200) -> ClusterState:
    """Nodes of 1–4 NUMA nodes, most able to pin CPUs, with 0–8 GPUs of two models and NUMA loads."""
    state = ClusterState(capacity=n, gpu_cols=8)
    for i in range(n):
        numa = int(rng.choice([1, 2, 4]))
        topology = make_topology(f"m{i}", (int(rng.choice([8, 16])),) * numa, gpus=int(rng.choice([0, 2, 4, 8])),
                                 model=("A100", "T4")[i % 2], exclusive=bool(rng.random() < 0.8))
        state.upsert_node(topology)
        state.update_load(topology.node, {j: float(rng.uniform(0.05, 0.9)) for j in range(numa)})
    return state


def mixed_pods(rng: np.random.Generator, count: int) -> list[PodRequest]:
    """CPU-only, exclusive-CPU (every policy), GPU-share and whole-GPU pods."""
    pods = []
    for i in range(count):
        cpu, kind = int(rng.choice([1000, 2000, 4000])), i % 5
        gpus = dict(gpu_count=1, gpu_milli=int(rng.choice([250, 500]))) if kind == 2 else \
            dict(gpu_count=int(rng.choice([1, 2]))) if kind == 3 else {}
        pods.append(PodRequest(f"p{i}", cpu, 1024, exclusive_cpus=kind == 1,
                               cpu_policy=("spread", "single-numa", "auto")[i % 3], **gpus))
    return pods


@pytest.mark.parametrize("name", ["fgd", "fgd-cpu"])
def test_cached_and_reference_decide_alike_with_exclusive_cpus_and_random_ties(name):
    # the cache ranks node states, not rows: exclusive pods narrow its
    # candidates after scoring, random ties draw from its tied rows
    pods = mixed_pods(np.random.default_rng(5), 500)
    workload = typical_workload([p.shape for p in pods])
    runs = {}
    for reference in (True, False):
        state, strategy, rng = mixed_cluster(np.random.default_rng(4)), make_strategy(name, workload, reference=reference), \
            np.random.default_rng(6)
        out, placed = [], []
        for pod in pods:
            choice = decide(state, pod, strategy, rng=rng)
            out.append((choice.ok, choice.node, choice.allocation.gpus if choice.ok else None,
                        dict(choice.allocation.numa_cpus) if choice.ok else None, choice.cost, choice.reason,
                        choice.candidates, dict(choice.filtered), choice.runners_up()))
            if choice.ok and state.assume(pod.key, choice.allocation).ok:
                placed.append(pod.key)
                if len(placed) % 3 == 0:
                    state.release(placed.pop(0))
        runs[reference] = out
    assert sum(1 for ok, *_ in runs[True] if ok) > 400
    assert sum(1 for ok, _, _, numa_cpus, *_ in runs[True] if ok and numa_cpus) > 80  # exclusive pods placed
    assert [i for i, (a, b) in enumerate(zip(runs[True], runs[False])) if a != b] == []


# ---- the cache's own rules -----------------------------------------------------------

WORKLOAD = TargetWorkload((Shape(1000, 500, 1), Shape(2000, 1000, 1), Shape(4000)), np.array([0.5, 0.25, 0.25]))


class Counting:
    """A row-local strategy that records which figures it was asked to score."""

    name, scores_cpu_pods = "counting", True

    def __init__(self):
        self.calls: list[list[int]] = []

    def score(self, c: Candidates, shape: Shape):
        inner = make_strategy("fgd", WORKLOAD, reference=True)
        self.calls.append(sorted(c.cpu_free.tolist()))
        return inner.score(c, shape)


def cluster(n: int) -> ClusterState:
    state = ClusterState()
    for i in range(n):
        state.upsert_node(make_topology(f"n{i}", (8,), gpus=2))
    return state


def test_identical_nodes_are_scored_once_and_a_changed_node_once_more():
    state, counting = cluster(50), Counting()
    cache = ScoreCache(counting)
    shape = Shape(1000, 1000, 1)
    rows = np.flatnonzero(state.present[:state.size])
    first = cache.score(Candidates(state, rows), shape)
    assert counting.calls == [[8000]]  # 50 nodes, one state
    assert state.assume("p", Allocation.of("n3", 1000, gpus={"gpu0": 1000})).ok
    second = cache.score(Candidates(state, rows), shape)
    assert counting.calls == [[8000], [7000]]  # only the state n3 moved to
    cache.score(Candidates(state, rows), shape)
    assert len(counting.calls) == 2  # nothing new: nothing scored
    # the scores are the strategy's: n3 now differs from the rest, the rest kept theirs
    plain = make_strategy("fgd", WORKLOAD, reference=True).score(Candidates(state, rows), shape)
    assert second.cost.tolist() == plain.cost.tolist() and first.cost[0] == second.cost[0]


def test_a_shapes_keys_are_packed_from_its_second_pod_and_rank_as_before():
    # a shape's first pod ranks by its keys themselves (most entries of a many-shaped mix
    # serve one pod); from its second on, by its keys packed, which tie where the keys do
    state = cluster(50)
    cache = ScoreCache(make_strategy("fgd-cpu", WORKLOAD, reference=True))
    rows, shape = np.flatnonzero(state.present[:state.size]), Shape(1000, 1000, 1)
    assert state.assume("p", Allocation.of("n3", 1000, gpus={"gpu0": 1000})).ok
    assert state.assume("q", Allocation.of("n7", 7000, gpus={"gpu1": 1000})).ok
    first = cache.score_states(Candidates(state, rows), shape)
    assert first.packed is None and first.present is not None
    second = cache.score_states(Candidates(state, rows), shape)
    assert second.packed is not None and (second.packed >= 0).all()
    assert tied_states(first)[0].tolist() == tied_states(second)[0].tolist()
    keys = [(second.cost[sid], *(t[sid] for t in second.tiebreaks)) for sid in second.sids.tolist()]
    assert len(set(keys)) > 1
    order = sorted(range(len(keys)), key=lambda j: (keys[j], j))
    assert sorted(range(len(keys)), key=lambda j: (second.packed[j], j)) == order


def test_a_node_back_in_a_known_state_costs_nothing():
    state, counting = cluster(4), Counting()
    cache = ScoreCache(counting)
    rows, shape = np.arange(4), Shape(1000, 1000, 1)
    cache.score(Candidates(state, rows), shape)
    state.assume("p", Allocation.of("n1", 1000, gpus={"gpu0": 1000}))
    cache.score(Candidates(state, rows), shape)
    state.release("p")  # n1 is back where it was
    cache.score(Candidates(state, rows), shape)
    assert len(counting.calls) == 2


def test_own_devices_pass_through_uncached():
    state, counting = cluster(3), Counting()
    cache = ScoreCache(counting)
    rows, shape = np.arange(3), Shape(1000, 1000, 1)
    eligible = state.gpu_valid[:3].copy()
    eligible[1, 0] = False
    for _ in range(2):
        cache.score(Candidates(state, rows, eligible), shape)
    assert len(counting.calls) == 2


def test_a_cached_decision_with_a_kind_or_group_is_the_reference_one():
    state = cluster(6)
    state.upsert_node(make_topology("v", (8,), gpus=1, virtual=2))
    pod = PodRequest("p", 1000, gpu_count=1, gpu_milli=500, gpu_kind="virtual")
    cached = decide(state, pod, make_strategy("fgd-cpu", WORKLOAD))
    plain = decide(state, pod, make_strategy("fgd-cpu", WORKLOAD, reference=True))
    assert (cached.node, cached.allocation) == (plain.node, plain.allocation) == ("v", cached.allocation)


def test_the_cache_decides_as_the_reference_when_it_catches_up_from_a_short_memory(monkeypatch):
    # a cluster remembers its recently changed rows only so far back; past that the
    # cache compares every row's version, and must still decide as the reference
    monkeypatch.setattr("tidal_placement.cluster_arrays.TOUCHED_REMEMBERED", 8)
    workload = typical_workload([p.shape for p in BASE])
    sequence = arrival_sequence(BASE, seed=2, capacity_milli=1000 * sum(n.gpus for n in NODES))[:150]
    rank = np.random.default_rng([2, 7]).permutation(len(NODES))
    reference = decisions(make_strategy("fgd-cpu", workload, reference=True), sequence, rank, leave_every=3)
    assert decisions(make_strategy("fgd-cpu", workload), sequence, rank, leave_every=3) == reference


def test_the_cache_starts_afresh_past_a_few_states_per_row_and_decides_as_the_reference(monkeypatch):
    # states the rows have left are forgotten past STATES_PER_ROW per row (the
    # per-shape arrays grew with every state ever seen: 66 MiB after 60,000
    # pods on 5,000 nodes); starting afresh changes no decision. Scaled down:
    # 150 pods on openb's 1,213 nodes reach about 130 states.
    monkeypatch.setattr("tidal_placement.gpu_score_cache.MIN_STATES", 8)
    monkeypatch.setattr("tidal_placement.gpu_score_cache.STATES_PER_ROW", 0.04)  # 48 states
    workload = typical_workload([p.shape for p in BASE])
    sequence = arrival_sequence(BASE, seed=3, capacity_milli=1000 * sum(n.gpus for n in NODES))[:150]
    rank = np.random.default_rng([3, 7]).permutation(len(NODES))
    reference = decisions(make_strategy("fgd-cpu", workload, reference=True), sequence, rank, leave_every=3)
    sizes: list[int] = []
    real_current = ScoreCache._current

    def current(self, cluster):
        states = real_current(self, cluster)
        sizes.append(len(states))
        return states

    monkeypatch.setattr(ScoreCache, "_current", current)
    assert decisions(make_strategy("fgd-cpu", workload), sequence, rank, leave_every=3) == reference
    assert sum(later < earlier for earlier, later in zip(sizes, sizes[1:])) >= 2  # it started afresh, more than once
    assert max(sizes) <= 0.04 * len(NODES) + 5  # past the limit by one refresh at most


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["assume", "release", "upsert", "remove", "allocatable"]),
                          st.integers(0, 5)), max_size=40), st.sampled_from([4, 16, 1 << 16]))
def test_the_rows_touched_after_a_version_are_the_rows_whose_version_moved(ops, remembered):
    import tidal_placement.cluster_arrays as arrays

    old, arrays.TOUCHED_REMEMBERED = arrays.TOUCHED_REMEMBERED, remembered
    try:
        state, stamps, held = cluster(6), [], []
        for op, i in ops:
            stamps.append(state.stamp)
            node = f"n{i}"
            if op == "assume" and node in state.rows:
                if state.assume(f"p{len(stamps)}", Allocation.of(node, 1000, gpus={"gpu0": 500})).ok:
                    held.append(f"p{len(stamps)}")
            elif op == "release" and held:
                state.release(held.pop(i % len(held)))
            elif op == "upsert":
                state.upsert_node(make_topology(node, (8,), gpus=2))
            elif op == "remove":
                state.remove_node(node)
            elif op == "allocatable" and node in state.rows:
                state.set_allocatable(node, Resources(cpu_milli=4000 + i, memory_mib=1024))
        for stamp in stamps:
            touched = state.rows_touched_after(stamp)
            moved = set(np.flatnonzero(state.version[:state.size] > stamp).tolist())
            if touched is not None:  # removed rows (version reset) may be listed too, never missed
                assert moved <= set(touched) <= moved | {r for r, name in enumerate(state.names) if name is None}
    finally:
        arrays.TOUCHED_REMEMBERED = old


def test_a_cache_that_succeeds_another_starts_from_its_node_states_and_decides_as_the_new_reference():
    # the placement service rebuilds its strategy as it learns the workload: the
    # new cache starts from the old one's node states (those nodes are in now),
    # never from its scores
    sequence = arrival_sequence(BASE, seed=4, capacity_milli=1000 * sum(n.gpus for n in NODES))[:300]
    early = typical_workload([p.shape for p in sequence[:20]])
    later = typical_workload([p.shape for p in sequence[:200]])
    rank = np.random.default_rng([4, 7]).permutation(len(NODES))

    def run(first, then) -> list[tuple]:
        state, out, strategy = load_cluster(NODES), [], first
        for i, pod in enumerate(sequence):
            if i == 150:
                previous, strategy = strategy, then
                if isinstance(strategy, ScoreCache):
                    known = len(previous._states)
                    strategy.succeed(previous)
                    states = strategy._states
                    in_use = states.row_state[:state.size]
                    # only the states some node is in now are kept, numbered afresh
                    assert len(states) == len(set(in_use.tolist()) - {-1}) < known
                    assert sorted(states.ids.values()) == list(range(len(states)))
            request = pod_request(pod, key=f"{i}")
            choice = decide(state, request, strategy, rank=rank)
            out.append((choice.ok, choice.node, choice.allocation.gpus if choice.ok else None, choice.cost))
            if choice.ok:
                state.assume(request.key, choice.allocation)
        return out

    reference = run(make_strategy("fgd-cpu", early, reference=True), make_strategy("fgd-cpu", later, reference=True))
    cached = run(make_strategy("fgd-cpu", early), make_strategy("fgd-cpu", later))
    assert sum(ok for ok, *_ in reference) > 250
    assert [i for i, (a, b) in enumerate(zip(reference, cached)) if a != b] == []


def test_a_cache_succeeded_by_another_still_decides_as_its_reference():
    # a scheduling cycle already under way keeps the strategy it started with
    # while the service relearns: the successor must not renumber its states
    state = load_cluster(NODES)
    sequence = arrival_sequence(BASE, seed=5, capacity_milli=1000 * sum(n.gpus for n in NODES))[:160]
    workload = typical_workload([p.shape for p in sequence])
    old, reference = make_strategy("fgd-cpu", workload), make_strategy("fgd-cpu", workload, reference=True)
    for i, pod in enumerate(sequence):
        request = pod_request(pod, key=f"{i}")
        choice = decide(state, request, old)
        assert (choice.node, choice.cost) == (lambda c: (c.node, c.cost))(decide(state, request, reference))
        if choice.ok:
            state.assume(request.key, choice.allocation)
        if i % 40 == 39:  # pods leave, a successor is made, the old cache goes on
            for j in range(i - 39, i, 3):
                state.release(str(j))
            make_strategy("fgd-cpu", workload).succeed(old)
