"""Placement's scores, one table per rule, with the arithmetic in a comment:
§E's NUMA load score for shared-pool pods, §A's per CPU policy (and the
CPUs `exclusive_take` names), best-fit's leftover and its quantised form,
FGD's sigmoid node score, and the final tie-breaks. Each on an empty node
and on one whose NUMA nodes or GPUs are partly held."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidal_placement.decide import PodRequest, decide
from tidal_placement.gpu_bestfit import BestFit, _normalised
from tidal_placement.gpu_candidates import Candidates, sigmoid_score
from tidal_placement.gpu_fgd import frag_deltas
from tidal_placement.gpu_score_cache import ScoreCache
from tidal_placement.gpu_strategies import GPU_STRATEGIES, make_strategy
from tidal_placement.gpu_workload import Shape, typical_workload
from tidal_placement.numa_lookup import (exclusive_feasible, exclusive_scores, exclusive_take, shared_numa_least,
                                         shared_numa_scores, shared_numa_take)
from tidal_placement.ranking import least

from placement_builders import cluster, free, node, use

# ---- §E: a shared-pool pod needing c CPUs ------------------------------------------------------------
# score = mean load of the shortest prefix of NUMA nodes, least loaded first, whose free CPUs cover c;
# none covering: the mean of all. Node n: NUMA 0 (load 0.2) and 1 (load 0.6), 4 CPUs each.
SHARED = [
    # used (exclusive CPUs held), need, score, NUMA ids walked
    (None, 3, 0.2, (0,)),            # NUMA 0 alone: 4 ≥ 3
    (None, 4, 0.2, (0,)),            # exactly covered
    (None, 5, 0.4, (0, 1)),          # 4 < 5, then 4 + 4: (0.2 + 0.6) / 2
    (None, 9, 0.4, (0, 1)),          # 8 < 9: none covers, the mean of all
    ({0: 2}, 2, 0.2, (0,)),          # free [2, 4]: NUMA 0 covers 2
    ({0: 2}, 3, 0.4, (0, 1)),        # 2 < 3: the walk goes on to NUMA 1
    ({1: 4}, 4, 0.2, (0,)),          # NUMA 1 full: NUMA 0 still covers 4
    ({1: 4}, 5, 0.4, (0, 1)),        # 4 + 0 < 5: the mean of all
]


@pytest.mark.parametrize("used, need, score, walked", SHARED)
def test_e_shared_pool_score(used, need, score, walked):
    state = cluster(node("n", (4, 4)), loads={"n": {0: 0.2, 1: 0.6}})
    if used:
        use(state, "n", numa=used)
    r = state.rows["n"]
    assert shared_numa_scores(state, np.array([r]), need)[0] == pytest.approx(score)
    assert shared_numa_take(state, r, need) == (pytest.approx(score), walked)
    assert float(state.numa_walk[min(need, 32), r]) == pytest.approx(score)  # the kept walk says the same


def test_e_three_numa_nodes_walk_in_load_order_not_id_order():
    # loads 0.1, 0.5, 0.3: order 0, 2, 1. 6 CPUs: 4 (NUMA 0) < 6, 4 + 4 ≥ 6 → (0.1 + 0.3) / 2 = 0.2
    # with NUMA 2 held down to 1 free: 4 + 1 < 6, + 4 → (0.1 + 0.3 + 0.5) / 3 = 0.3
    state = cluster(node("n", (4, 4, 4)), loads={"n": {0: 0.1, 1: 0.5, 2: 0.3}})
    r = state.rows["n"]
    assert shared_numa_take(state, r, 6) == (pytest.approx(0.2), (0, 2))
    # 8 CPUs, exactly covered by NUMA 0 and 2 (4 + 4): still (0.1 + 0.3) / 2, not the mean of all three
    assert shared_numa_scores(state, np.array([r]), 8)[0] == pytest.approx(0.2)
    assert exclusive_scores(state, "auto", 8, np.array([r]))[0] == pytest.approx(0.2)
    use(state, "n", numa={2: 3})
    assert shared_numa_take(state, r, 6) == (pytest.approx(0.3), (0, 1, 2))


def test_e_past_the_kept_walks_a_few_rows_walk_one_by_one():
    # 40 CPUs (more than the 32 kept per row), nodes of 3 × 20 CPUs:
    #   a: loads 0.1, 0.5, 0.3 → 20 < 40, 20 + 20 = 40 covers exactly → (0.1 + 0.3) / 2 = 0.2
    #   b: loads 0.25 each → 0.25. a wins; walking one prefix too far would score a (0.1 + 0.3 + 0.5) / 3 = 0.3
    state = cluster(node("a", (20, 20, 20)), node("b", (20, 20, 20)),
                    loads={"a": {0: 0.1, 1: 0.5, 2: 0.3}, "b": {0: 0.25, 1: 0.25, 2: 0.25}})
    rows = np.array([state.rows["a"], state.rows["b"]])
    assert shared_numa_least(state, rows, 40).tolist() == [0]
    assert decide(state, PodRequest("default/p", cpu_milli=40000)).node == "a"


@pytest.mark.parametrize("used, chosen, score", [
    (None, "a", 0.2),       # a: NUMA 0 covers 3 → 0.2;  b: 0.3 → a
    ({0: 2}, "b", 0.3),     # a: free [2, 4], 2 < 3 → (0.2 + 0.6) / 2 = 0.4 > b's 0.3 → b
])
def test_e_lowest_score_wins_and_what_is_held_changes_it(used, chosen, score):
    state = cluster(node("a", (4, 4)), node("b", (4, 4)), loads={"a": {0: 0.2, 1: 0.6}, "b": {0: 0.3, 1: 0.3}})
    if used:
        use(state, "a", numa=used)
    choice = decide(state, PodRequest("default/p", cpu_milli=3000))
    assert (choice.node, choice.numa_score) == (chosen, pytest.approx(score))


@pytest.mark.parametrize("need", [3, 33, 40])  # within the kept walks (≤ 32) and past them
def test_e_least_positions_are_the_least_scores(need):
    # nodes of 2 × 24 CPUs, loads chosen so each need has a different winner set
    loads = {"a": {0: 0.2, 1: 0.6}, "b": {0: 0.4, 1: 0.4}, "c": {0: 0.1, 1: 0.9}, "d": {0: 0.4, 1: 0.4}}
    state = cluster(*(node(name, (24, 24)) for name in loads), loads=loads)
    use(state, "c", numa={0: 20})  # c: NUMA 0 has 4 free
    rows = np.array([state.rows[name] for name in loads])
    scores = shared_numa_scores(state, rows, need)
    # need 3: a 0.2, b 0.4, c 0.1, d 0.4 → c; need 33: a 0.4, b 0.4, c (4 + 24 < 33) 0.5, d 0.4 → a, b, d
    expected = {3: [2], 33: [0, 1, 3], 40: [0, 1, 3]}[need]
    assert least(np.where(np.isfinite(scores), scores, np.inf)).nonzero()[0].tolist() == expected
    assert shared_numa_least(state, rows, need).tolist() == expected


# ---- §A: k exclusive CPUs, per policy ----------------------------------------------------------------
# NUMA 0 (load 0.2), NUMA 1 (load 0.6), 4 CPUs each.
#   auto:        §E's walk over free CPUs, the prefix must cover k (else infeasible)
#   single-numa: the least load among NUMA nodes with ≥ k free
#   spread:      b = ⌊k/n⌋ ≥ 1: the mean of all loads; b = 0: the mean load of the k NUMA nodes with most free
EXCLUSIVE = [
    # policy, used, k, score, CPUs named per NUMA id
    ("auto", None, 3, 0.2, {0: 3}),
    ("auto", None, 6, 0.4, {0: 4, 1: 2}),        # fill the least loaded, then the next: (0.2 + 0.6) / 2
    ("auto", {0: 1}, 4, 0.4, {0: 3, 1: 1}),      # free [3, 4]: 3 < 4 → both
    ("single-numa", None, 3, 0.2, {0: 3}),
    ("single-numa", {0: 2}, 3, 0.6, {1: 3}),     # NUMA 0 has 2 < 3: only NUMA 1 fits
    ("single-numa", {0: 1}, 3, 0.2, {0: 3}),     # NUMA 0 has 3 ≥ 3, exactly: it fits
    ("spread", None, 4, 0.4, {0: 2, 1: 2}),      # b = 2: the mean of all
    ("spread", None, 1, 0.2, {0: 1}),            # b = 0, e = 1: the most free, ties to the lower column
    ("spread", {0: 1}, 1, 0.6, {1: 1}),          # free [3, 4]: NUMA 1 has most free
    ("spread", {0: 1}, 3, 0.4, {0: 1, 1: 2}),    # b = 1, e = 1: one more on NUMA 1 (most free)
]


@pytest.mark.parametrize("policy, used, k, score, counts", EXCLUSIVE)
def test_a_exclusive_score_and_cpus_per_policy(policy, used, k, score, counts):
    state = cluster(node("n", (4, 4)), loads={"n": {0: 0.2, 1: 0.6}})
    if used:
        use(state, "n", numa=used)
    r = state.rows["n"]
    rows = np.array([r])
    assert exclusive_feasible(state, policy, k, rows)[0]
    assert exclusive_scores(state, policy, k, rows)[0] == pytest.approx(score)
    taken, taken_score = exclusive_take(state, policy, k, r)
    assert (taken, taken_score) == (counts, pytest.approx(score))
    before = free(state, "n")["numa"]
    use(state, "n", numa=taken)  # what is named fits what is free
    assert free(state, "n")["numa"] == [before[j] - counts.get(j, 0) for j in (0, 1)]


def test_a_auto_on_a_node_that_cannot_cover_scores_inf():
    # auto scores with all_when_short=False: a node whose NUMA nodes hold 4 + 0 free cannot take 5
    state = cluster(node("a", (4, 4)), node("b", (4, 4)), loads={"a": {0: 0.1, 1: 0.1}, "b": {0: 0.9, 1: 0.9}})
    use(state, "a", numa={1: 4})
    rows = np.array([state.rows["a"], state.rows["b"]])
    scores = exclusive_scores(state, "auto", 5, rows)
    assert math.isinf(scores[0]) and scores[1] == pytest.approx(0.9)
    choice = decide(state, PodRequest("default/p", cpu_milli=5000, exclusive_cpus=True))
    assert choice.node == "b" and choice.filtered == {"numa": 1}


@pytest.mark.parametrize("used, chosen", [
    (None, "a"),      # single-numa, 3 CPUs: a's NUMA 0 (0.2) < b's (0.3)
    ({0: 2}, "b"),    # a's NUMA 0 down to 2: a scores its NUMA 1, 0.6 > b's 0.3
])
def test_a_the_least_exclusive_score_wins(used, chosen):
    state = cluster(node("a", (4, 4)), node("b", (4, 4)), loads={"a": {0: 0.2, 1: 0.6}, "b": {0: 0.3, 1: 0.7}})
    if used:
        use(state, "a", numa=used)
    choice = decide(state, PodRequest("default/p", cpu_milli=3000, exclusive_cpus=True, cpu_policy="single-numa"))
    assert choice.node == chosen


# ---- best fit ------------------------------------------------------------------------------------------
# leftover = ½ (cpu_free − cpu) / 128000 + ½ (gpu_idle − gpu) / 8000, lowest wins


def candidates(state, *names):
    return Candidates(state, np.array([state.rows[name] for name in names]))


def test_best_fit_leftover():
    # a: 8 CPUs, 2 idle GPUs; b: the same less 6000 m and gpu0 whole. Pod: 1000 m, 1 GPU.
    #   a: ½ (8000 − 1000) / 128000 + ½ (2000 − 1000) / 8000 = 0.02734375 + 0.0625 = 0.08984375
    #   b: ½ (2000 − 1000) / 128000 + ½ (1000 − 1000) / 8000 = 0.00390625
    state = cluster(node("a", (4, 4), gpus=2), node("b", (4, 4), gpus=2))
    use(state, "b", cpu=6000, gpus={"gpu0": 1000})
    scored = BestFit().score(candidates(state, "a", "b"), Shape(1000, 1000, 1))
    assert scored.cost.tolist() == pytest.approx([0.08984375, 0.00390625])
    choice = decide(state, PodRequest("default/p", cpu_milli=1000, gpu_count=1), make_strategy("best-fit"))
    assert choice.node == "b" and choice.allocation.gpus == (("gpu1", 1000),)


def test_best_fit_quantised_as_the_simulator():
    # a: 1 − 0.08984375 → ⌊91.015…⌋ = 91; b: ⌊99.609…⌋ = 99; min-max to 0..100: a 0, b 100; cost = −score
    state = cluster(node("a", (4, 4), gpus=2), node("b", (4, 4), gpus=2))
    use(state, "b", cpu=6000, gpus={"gpu0": 1000})
    scored = BestFit(quantised=True).score(candidates(state, "a", "b"), Shape(1000, 1000, 1))
    assert scored.cost.tolist() == [0.0, -100.0]
    # 91, 95, 99 → ⌊(95 − 91) · 100 / 8⌋ = 50; all equal → 0 (no division by zero)
    assert _normalised(np.array([91.0, 95.0, 99.0])).tolist() == [0.0, 50.0, 100.0]
    assert _normalised(np.array([7.0, 7.0])).tolist() == [0.0, 0.0]


def test_best_fit_gives_a_share_the_fullest_device_that_fits():
    # gpu0 400 left, gpu1 1000: a 300 share goes to gpu0 (400 − 300 leaves least); a 500 share to gpu1
    state = cluster(node("n", (4, 4), gpus=2))
    use(state, "n", gpus={"gpu0": 600})
    for milli, gpu in ((300, "gpu0"), (400, "gpu0"), (500, "gpu1")):
        choice = decide(state, PodRequest("default/p", cpu_milli=1000, gpu_count=1, gpu_milli=milli),
                        make_strategy("best-fit"))
        assert choice.allocation.gpus == ((gpu, milli),)


# ---- FGD's node score ----------------------------------------------------------------------------------

@pytest.mark.parametrize("delta, score", [
    (0.0, 50.0),          # 100 / (1 + e^0)
    (1000.0, 73.0),       # ⌊100 / (1 + e^−1)⌋ = ⌊73.1⌋
    (-1000.0, 26.0),      # ⌊100 / (1 + e^1)⌋ = ⌊26.9⌋
    (1e9, 100.0),         # ⌊100 / (1 + e^−10⁶)⌋
    (-1e9, 0.0),          # the exponent capped at 709: no overflow, the score 0
])
def test_fgd_sigmoid_score(delta, score):
    assert sigmoid_score(np.array([delta])).tolist() == [score]


# ---- the registry ------------------------------------------------------------------------------------

def test_the_registry_names_every_strategy_and_wraps_the_row_local_ones():
    assert set(GPU_STRATEGIES) == {"best-fit", "fgd", "fgd-cpu", "joint"}
    workload = typical_workload([Shape(1000, 1000, 1)])  # FGD's target: one shape
    for name in GPU_STRATEGIES:
        cached = make_strategy(name, workload)
        # the row-local ones (a candidate's score reads its own row only) answer through a score cache
        assert cached.name == name and isinstance(cached, ScoreCache) is (name in {"fgd", "fgd-cpu"})
        assert not isinstance(make_strategy(name, workload, reference=True), ScoreCache)
    with pytest.raises(ValueError, match="unknown GPU strategy 'nope'; known: best-fit, fgd, fgd-cpu, joint"):
        make_strategy("nope")


# ---- final ties ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("used", [False, True])
def test_final_ties_go_to_the_lowest_rank_else_the_lowest_row(used):
    # three nodes alike (the same §E score): the lowest row, or the lowest rank given
    state = cluster(node("a", (4,)), node("b", (4,)), node("c", (4,)))
    if used:  # each partly used alike: still tied
        for name in "abc":
            use(state, name, cpu=1000)
    request = PodRequest("default/p", cpu_milli=1000)
    assert decide(state, request).node == "a"
    rank = np.zeros(state.capacity, dtype=np.int64)
    rank[[state.rows["a"], state.rows["b"], state.rows["c"]]] = [2, 0, 1]
    assert decide(state, request, rank=rank).node == "b"
    picks = {decide(state, request, rng=np.random.default_rng(seed)).node for seed in range(30)}
    assert picks == {"a", "b", "c"}  # at random with rng: each tied node in turn


def test_least_is_within_rounding():
    # 0.1 + 0.2 = 0.30000000000000004: the same as 0.3 for a tie
    assert least(np.array([0.3, 0.1 + 0.2, 0.31])).tolist() == [True, True, False]


# ---- FGD: Δ = F(before) − F(after placing the pod), score = ⌊100 · sigmoid(Δ / 1000)⌋, cost = −score ------

@pytest.mark.parametrize("shape, gpus", [
    (Shape(1000, 1000, 1), 1),    # one whole GPU: the lowest free device
    (Shape(2000, 0, 0), 0),       # a CPU-only pod: its CPU can strand GPUs too
    (Shape(1000, 500, 1), 1),     # a share: the device FGD scores best
])
def test_fgd_scores_the_fragmentation_each_node_loses(shape, gpus):
    # F measured on each node before and after actually taking the pod's decision there
    workload = typical_workload([Shape(1000, 1000, 1), Shape(2000, 500, 1), Shape(4000, 2000, 2)], coverage=1.0)
    state = cluster(node("a", (4, 4), gpus=2), node("b", (4, 4), gpus=2), node("c", (2, 2), gpus=2))
    use(state, "b", cpu=2000, gpus={"gpu0": 500})   # partly used
    use(state, "c", cpu=1000, gpus={"gpu1": 1000})
    fgd = make_strategy("fgd", workload, reference=True)
    names = ("a", "b", "c")
    scored = fgd.score(candidates(state, *names), shape)
    frag, models = fgd.frag, tuple(state.models)
    deltas = frag_deltas(frag, candidates(state, *names), shape)  # (nodes,), or (nodes × devices) for a share

    def f(r):
        s = slice(r, r + 1)
        return float(frag.node_frag(state.cpu_free[s], state.gpu_free[s], state.gpu_model[s], models)[0])

    request = PodRequest("default/p", cpu_milli=shape.cpu_milli, gpu_count=shape.gpu_count,
                         gpu_milli=shape.gpu_milli or 1000)
    for j, name in enumerate(names):
        r = state.rows[name]
        before = f(r)
        device = None if scored.device is None else int(scored.device[j])
        if gpus and device is not None:
            gpu_taken = {state.gpu_id(r, device): shape.gpu_milli}
        else:  # whole GPUs: the lowest free devices (which ones does not change F)
            whole = [k for k in range(2) if state.gpu_free[r, k] == 1000][:shape.gpu_count]
            gpu_taken = {state.gpu_id(r, k): 1000 for k in whole}
        key = use(state, name, cpu=request.cpu_milli, gpus=gpu_taken)
        delta = before - f(r)
        state.release(key)
        assert scored.cost[j] == -sigmoid_score(np.array([delta]))[0], name
        assert (deltas[j] if deltas.ndim == 1 else deltas[j, device]) == pytest.approx(delta)
