"""The cached-prefix NUMA lookups used on the hot path agree with the
reference vectorised computations (`distribute`, `numa_scores`) on random
clusters: same feasibility everywhere, same minimum and same winners."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_policy.cpu_distribution import distribute
from tidal_placement.cluster_arrays import WALK_NEEDS
from tidal_placement.numa_lookup import (_walked, exclusive_feasible, exclusive_scores, exclusive_take,
                                         shared_numa_least, shared_numa_scores, shared_numa_take)
from tidal_placement.ranking import least
from tidal_policy.numa_walk import numa_scores
from tidal_simulator.topology_builder import make_topology


def random_cluster(seed: int, nodes: int = 40) -> ClusterState:
    rng = np.random.default_rng(seed)
    state = ClusterState()
    for i in range(nodes):
        numa = int(rng.choice([1, 2, 4, 8]))
        name = f"n{i}"
        state.upsert_node(make_topology(name, tuple(int(rng.choice([2, 4, 8])) for _ in range(numa))))
        # loads on a coarse grid so equal loads (ties) happen
        state.update_load(name, {j: float(rng.integers(0, 5)) / 4 for j in range(numa)})
        held = {j: int(rng.integers(0, 3)) for j in range(numa)}
        state.assume(f"{name}-x", Allocation.of(name, 1000 * sum(held.values()), 0, held))
    return state


def winners(score: np.ndarray) -> set[int]:
    finite = np.isfinite(score)
    if not finite.any():
        return set()
    return set(np.flatnonzero(score == score[finite].min()).tolist())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), cpus=st.integers(1, 20), policy=st.sampled_from(["spread", "single-numa", "auto"]))
def test_exclusive_lookups_match_distribute(seed, cpus, policy):
    state = random_cluster(seed)
    rows = np.flatnonzero(state.present[:state.size])
    ref = distribute(policy, cpus, state.numa_free[rows], state.numa_load[rows], state.numa_valid[rows])
    feasible = exclusive_feasible(state, policy, cpus, rows)
    assert feasible.tolist() == ref.feasible.tolist()
    assert exclusive_feasible(state, policy, cpus)[rows].tolist() == feasible.tolist()  # decide's filter stage
    if feasible.any():
        fast = exclusive_scores(state, policy, cpus, rows[feasible])
        assert winners(fast) == winners(ref.score[feasible])
        exact = np.isfinite(fast)
        assert fast[exact] == pytest.approx(ref.score[feasible][exact])  # finite values are the true scores


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), need=st.integers(0, 40))
def test_shared_lookup_matches_numa_scores(seed, need):
    state = random_cluster(seed)
    rows = np.flatnonzero(state.present[:state.size])
    valid, load = state.numa_valid[rows], state.numa_load[rows]
    ref = numa_scores(need, state.numa_free[rows], load, valid)
    every = np.where(valid, load, 0).sum(axis=1) / valid.sum(axis=1)
    reference = np.where(ref.feasible, ref.score, every)
    fast = shared_numa_scores(state, rows, need)
    assert winners(fast) == winners(reference)
    exact = np.isfinite(fast)
    assert fast[exact] == pytest.approx(reference[exact])  # every finite value is the true score


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), need=st.integers(0, 40), nodes=st.integers(1, 60))
def test_the_least_shared_scores_are_found_from_the_head_loads(seed, need, nodes):
    # coarse loads: many nodes tie on their least-loaded NUMA node, covered or not
    state = random_cluster(seed, nodes)
    rows = np.flatnonzero(state.present[:state.size])
    every = least(shared_numa_scores(state, rows, need)).nonzero()[0]
    assert shared_numa_least(state, rows, need).tolist() == every.tolist()
    assert shared_numa_least(state, rows[::-1], need).tolist() == least(
        shared_numa_scores(state, rows[::-1], need)).nonzero()[0].tolist()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_the_kept_walks_are_the_walks_for_every_request_size_as_rows_change(seed):
    # `numa_walk[need]` is kept per row as its figures change: loads, exclusive CPUs
    # held and given back, a node removed and another in its row
    rng = np.random.default_rng(seed)
    state = random_cluster(seed, nodes=12)
    state.update_load("n3", {0: 0.9})
    state.release("n5-x")
    state.remove_node("n7")
    state.upsert_node(make_topology("m0", tuple(int(rng.choice([2, 4, 8])) for _ in range(int(rng.choice([1, 2, 4]))))))
    state.update_load("m0", {0: 0.25})
    rows = np.flatnonzero(state.present[:state.size])
    valid, load = state.numa_valid[rows], state.numa_load[rows]
    every = np.where(valid, load, 0).sum(axis=1) / valid.sum(axis=1)
    for need in range(WALK_NEEDS + 1):
        assert state.numa_walk[need].take(rows).tolist() == _walked(state, rows, need).tolist()
        ref = numa_scores(need, state.numa_free[rows], load, valid)
        assert state.numa_walk[need].take(rows) == pytest.approx(np.where(ref.feasible, ref.score, every))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_the_caches_row_prefixes_are_the_walks_prefixes(seed):
    # the cache updates one row in plain Python; `prefixes` and `load_order` are the walk's definition
    from tidal_policy.numa_walk import load_order, prefixes

    state = random_cluster(seed, nodes=12)
    n = state.size
    free, load, valid = state.numa_free[:n], state.numa_load[:n], state.numa_valid[:n]
    walk = prefixes(free, load, valid)
    assert np.array_equal(load_order(load, valid), state.numa_order[:n])
    assert np.array_equal(walk.cum_free, state.numa_cum_free[:n])
    assert np.array_equal(walk.cum_mean, state.numa_cum_mean[:n])
    assert np.array_equal(walk.cum_free[:, 0], state.numa_head_free[:n])
    assert np.array_equal(walk.cum_mean[:, 0], state.numa_head_mean[:n])
    # in free-descending order (ties: lower column): free CPUs (padding -1) and summed load (padding: the total)
    by_free = np.argsort(np.where(valid, -free, 1), axis=1, kind="stable")
    assert np.array_equal(np.where(valid, np.take_along_axis(free, by_free, axis=1), -1), state.numa_free_desc[:n])
    desc_load = np.cumsum(np.take_along_axis(np.where(valid, load, 0.0), by_free, axis=1), axis=1)
    assert np.array_equal(desc_load, state.numa_desc_cum_load[:n])
    assert np.array_equal(np.where(valid, free, -1).max(axis=1), state.numa_max_free[:n])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), need=st.integers(0, 40))
def test_the_chosen_nodes_walk_is_numa_scores_on_its_row(seed, need):
    # decide's per-decision walk reads the cached prefixes; numa_scores is the definition
    state = random_cluster(seed, nodes=12)
    for r in np.flatnonzero(state.present[:state.size]).tolist():
        one = slice(r, r + 1)
        walk = numa_scores(need, state.numa_free[one], state.numa_load[one], state.numa_valid[one])
        cols = np.flatnonzero(walk.taken[0]) if walk.feasible[0] else np.arange(int(state.numa_count[r]))
        expected = (float(state.numa_load[r, cols].mean()), tuple(sorted(int(state.numa_id[r, j]) for j in cols)))
        assert shared_numa_take(state, r, need) == expected


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), cpus=st.integers(0, 20), policy=st.sampled_from(["spread", "single-numa", "auto"]))
def test_the_chosen_nodes_exclusive_cpus_are_distribute_on_its_row(seed, cpus, policy):
    # decide names an exclusive pod's CPUs on the chosen row in plain Python; distribute is the definition
    state = random_cluster(seed, nodes=12)
    rows = np.flatnonzero(state.present[:state.size])
    for r in rows[exclusive_feasible(state, policy, cpus, rows)].tolist():
        one = slice(r, r + 1)
        dist = distribute(policy, cpus, state.numa_free[one], state.numa_load[one], state.numa_valid[one],
                          state.numa_order[one])
        counts = {int(state.numa_id[r, j]): int(dist.counts[0, j]) for j in np.flatnonzero(dist.counts[0])}
        assert dist.feasible[0]
        assert exclusive_take(state, policy, cpus, r) == (counts, float(dist.score[0]))  # the score to the bit
