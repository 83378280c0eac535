"""One placement decision: filters with reasons, §A CPU distribution, §E
NUMA choice, GPU devices, tie-breaking, and the allocation to assume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidal_placement.cluster_state import ClusterState
from tidal_placement.decide import PodRequest, decide
from tidal_placement.pod_request import placement_decision
from tidal_placement.gpu_strategies import make_strategy
from tidal_simulator.topology_builder import make_topology
from tidal_schemas import Gpu, GpuAsk, Resources

from builders import pod


def cluster(*topologies, loads=None) -> ClusterState:
    state = ClusterState()
    for t in topologies:
        state.upsert_node(t)
    for node, numa in (loads or {}).items():
        state.update_load(node, numa)
    return state


BEST_FIT = make_strategy("best-fit")


def test_filters_count_nodes_out_by_reason():
    # small: 2 CPUs < 4 asked; tainted: blocked; big: fits
    state = cluster(make_topology("small", (2,)), make_topology("tainted", (8,)), make_topology("big", (8,)))
    state.set_blocked("tainted", "taint")
    choice = decide(state, PodRequest("p", cpu_milli=4000))
    assert choice.ok and choice.node == "big"
    assert choice.filtered == {"cpu": 1, "taint": 1}  # a blocked node is counted out under its reason


def test_nowhere_to_go_says_why():
    state = cluster(make_topology("a", (2,), memory_mib=100), make_topology("b", (8,), memory_mib=100))
    choice = decide(state, PodRequest("p", cpu_milli=4000, memory_mib=200))
    assert not choice.ok and choice.allocation is None
    assert choice.reason == "0/2 nodes fit: 1 cpu, 1 memory"


def test_worked_example_e_lowest_numa_score_wins():
    # pod on the shared pool asking 4 CPUs. node1: numa1 (load 0.2) has 6 CPUs → 0.2.
    # node2: its least-loaded NUMA (0.1) has 2 CPUs, + numa1 (0.5) → 0.3. 0.2 < 0.3 → node1 / numa1.
    state = cluster(make_topology("node1", (2, 6)), make_topology("node2", (2, 8)),
                    loads={"node1": {0: 0.6, 1: 0.2}, "node2": {0: 0.1, 1: 0.5}})
    choice = decide(state, PodRequest("p", cpu_milli=4000))
    assert (choice.node, choice.numa_nodes, choice.numa_score) == ("node1", (1,), pytest.approx(0.2))
    assert choice.allocation.numa_cpus == ()  # shared pool: no exclusive CPUs taken


@pytest.mark.parametrize("policy, numa_cpus", [
    ("spread", ((0, 2), (1, 2))),   # worked example: 4 over 2 NUMA nodes → 2 + 2
    ("single-numa", ((1, 4),)),     # numa1 is less loaded (0.1 < 0.3)
    ("auto", ((1, 4),)),            # §E: numa1 alone covers 4
])
def test_exclusive_cpus_follow_the_policy(policy, numa_cpus):
    state = cluster(make_topology("n1", (8, 8)), loads={"n1": {0: 0.3, 1: 0.1}})
    choice = decide(state, PodRequest("p", cpu_milli=4000, exclusive_cpus=True, cpu_policy=policy))
    assert choice.ok and choice.allocation.numa_cpus == numa_cpus
    assert state.assume("p", choice.allocation).ok
    assert state.numa_free[state.rows["n1"], :2].sum() == 12  # 16 − 4


def test_exclusive_cpus_need_the_capability_and_room():
    state = cluster(make_topology("shared", (8, 8), exclusive=False), make_topology("tight", (2, 2)))
    choice = decide(state, PodRequest("p", cpu_milli=4000, exclusive_cpus=True, cpu_policy="single-numa"))
    # shared: no per-NUMA figures; tight: 4 > 2 on any single NUMA node
    assert not choice.ok and choice.filtered == {"no-exclusive-cpus": 1, "numa": 1}


@pytest.mark.parametrize("policy, tight, asks", [
    ("spread", (1, 7), 4000),       # 8 CPUs free, but spread needs 2 + 2 and one NUMA node has 1
    ("single-numa", (2, 2), 3000),  # 4 CPUs free, but no NUMA node has 3
])
def test_a_strategy_scores_only_nodes_that_pass_every_filter(policy, tight, asks):
    # A strategy normalising its score over the candidates (quantised best-fit, as
    # kube-scheduler) must never see a node the §A distribution rules out.
    state = cluster(make_topology("tight", tight, gpus=1), make_topology("roomy", (8, 8), gpus=1),
                    make_topology("no-gpu", (8, 8)))
    seen = []

    class Recording:
        name, scores_cpu_pods = "recording", True

        def score(self, c, shape):
            seen.append(sorted(state.names[r] for r in c.rows.tolist()))
            return BEST_FIT.score(c, shape)

    choice = decide(state, PodRequest("p", asks, exclusive_cpus=True, cpu_policy=policy, gpu_count=1), Recording())
    assert choice.ok and choice.node == "roomy"
    assert seen == [["roomy"]]
    assert choice.filtered == {"gpu": 1, "numa": 1} and choice.candidates == 1


def test_gpu_model_and_room_filters():
    state = cluster(make_topology("a100", (8,), gpus=1, model="A100"), make_topology("t4", (8,), gpus=2, model="T4"))
    assert decide(state, PodRequest("p", 1000, gpu_count=1, gpu_models=("A100",))).node == "a100"
    choice = decide(state, PodRequest("p", 1000, gpu_count=2, gpu_models=("A100",)))
    assert not choice.ok and choice.filtered == {"gpu-model": 1, "gpu": 1}  # t4: wrong model, a100: 1 < 2 GPUs


def test_mixed_model_node_is_checked_per_device():
    # a node reporting one A100 (gpu0) and one T4 (gpu1): a T4 pod must get gpu1
    topo = make_topology("mixed", (8,), gpus=2, model="A100")
    topo = topo.model_copy(update={"gpus": [topo.gpus[0], Gpu(id="gpu1", index=1, model="T4")]})
    state = cluster(topo)
    choice = decide(state, PodRequest("p", 1000, gpu_count=1, gpu_models=("T4",)), BEST_FIT)
    assert choice.allocation.gpus == (("gpu1", 1000),)
    assert not decide(state, PodRequest("p", 1000, gpu_count=2, gpu_models=("T4",)), BEST_FIT).ok


def test_gpu_kind_filter_uses_virtual_devices():
    state = cluster(make_topology("n1", (8,), gpus=1, virtual=2))
    choice = decide(state, PodRequest("p", 1000, gpu_count=1, gpu_milli=500, gpu_kind="virtual"))
    assert choice.allocation.gpus == (("vgpu0", 500),)


def test_whole_gpus_take_the_lowest_free_devices():
    state = cluster(make_topology("n1", (8,), gpus=4))
    state.assume("x", decide(state, PodRequest("x", 1000, gpu_count=1, gpu_milli=300), BEST_FIT).allocation)
    choice = decide(state, PodRequest("p", 1000, gpu_count=2), BEST_FIT)
    assert choice.allocation.gpus == (("gpu1", 1000), ("gpu2", 1000))  # gpu0 holds a share


def test_shares_pack_onto_the_fullest_gpu_that_fits():
    # 300 then 500 then 300: 300 + 500 on gpu0 (200 left), the last 300 no longer fits there → gpu1
    state = cluster(make_topology("n1", (8,), gpus=2))
    gpus = []
    for i, milli in enumerate((300, 500, 300)):
        choice = decide(state, PodRequest(f"p{i}", 100, gpu_count=1, gpu_milli=milli), BEST_FIT)
        state.assume(f"p{i}", choice.allocation)
        gpus.append(choice.allocation.gpus[0][0])
    assert gpus == ["gpu0", "gpu0", "gpu1"]


def test_best_fit_prefers_the_node_left_fullest():
    # leftover n1: .5·12000/128000 + .5·1000/8000 = 0.109; n2: .5·4000/128000 + 0 = 0.016 → n2
    state = cluster(make_topology("n1", (16,), gpus=2), make_topology("n2", (8,), gpus=1))
    choice = decide(state, PodRequest("p", 4000, gpu_count=1), BEST_FIT)
    assert choice.node == "n2" and choice.cost == pytest.approx(0.015625)


def test_ties_go_to_rank_then_row_or_rng():
    state = cluster(*(make_topology(f"n{i}", (4,)) for i in range(4)))
    request = PodRequest("p", 1000)
    assert decide(state, request).node == "n0"                                  # lowest row
    assert decide(state, request, rank=np.array([3, 2, 0, 1])).node == "n2"      # lowest rank
    picks = {decide(state, request, rng=np.random.default_rng(s)).node for s in range(20)}
    assert picks == {"n0", "n1", "n2", "n3"}                                      # uniform among equals


def test_allowed_mask_limits_devices():
    state = cluster(make_topology("n1", (8,), gpus=2), make_topology("n2", (8,), gpus=2))
    allowed = np.zeros((state.size, state.gpu_cols), dtype=bool)
    allowed[state.rows["n2"], 1] = True
    choice = decide(state, PodRequest("p", 1000, gpu_count=1), BEST_FIT, allowed=allowed)
    assert (choice.node, choice.allocation.gpus) == ("n2", (("gpu1", 1000),))


def test_forget_makes_the_same_decision_possible_again():
    state = cluster(make_topology("n1", (4, 4), gpus=1))
    request = PodRequest("p", 4000, exclusive_cpus=True, cpu_policy="single-numa", gpu_count=1)
    first = decide(state, request, BEST_FIT)
    assert state.assume("p", first.allocation).ok
    assert not decide(state, PodRequest("q", 4000, exclusive_cpus=True, gpu_count=1), BEST_FIT).ok
    state.forget("p")
    assert decide(state, request, BEST_FIT).allocation == first.allocation


def test_oversold_allocatable_admits_more():
    state = cluster(make_topology("n1", (4,), memory_mib=1024))
    assert not decide(state, PodRequest("p", 6000)).ok
    state.set_allocatable("n1", Resources(cpu_milli=8000, memory_mib=1024))
    assert decide(state, PodRequest("p", 6000)).ok


def test_request_from_a_pod_event():
    event = pod("web", cpu_milli=2000, exclusive_cpus=True, cpu_policy="spread",
                gpu=GpuAsk(count=1, milli=250, models=["T4"], kind="virtual"))
    assert PodRequest.from_pod(event) == PodRequest("default/web", 2000, 512, True, "spread", 1, 250, ("T4",),
                                                    "virtual")


def test_placement_decision_event():
    state = cluster(make_topology("n1", (4, 4), gpus=1))
    event = pod("train", cpu_milli=2000, exclusive_cpus=True, cpu_policy="spread", gpu=GpuAsk(count=1))
    placed = placement_decision(event, decide(state, PodRequest.from_pod(event), BEST_FIT), "d1")
    # spread 2 CPUs over 2 NUMA nodes: 1 + 1; the one GPU whole
    assert (placed.outcome, placed.node, placed.numa_cpus, placed.numa_nodes) == ("placed", "n1", {0: 1, 1: 1}, [0, 1])
    assert [(g.gpu, g.milli) for g in placed.gpus] == [("gpu0", 1000)]
    big = pod("huge", cpu_milli=64000)
    pending = placement_decision(big, decide(state, PodRequest.from_pod(big)), "d2")
    assert (pending.outcome, pending.node, pending.filtered) == ("pending", None, {"cpu": 1})
    assert pending.reason == "0/1 nodes fit: 1 cpu"


def test_runners_up_are_the_best_others_equal_values_in_row_order():
    from tidal_placement.ranking import runners_up

    # enough candidates share the least value: the first of them in row order, the chosen one left out
    values = np.array([3.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.5 + 0.5])
    least = np.flatnonzero(values <= values.min())
    assert runners_up(values, least, 3) == ((1, 1.0), (4, 1.0), (5, 1.0))
    # too few share it: the next values, equal ones in row order
    values = np.array([3.0, 2.0, 2.0, 0.0, 2.0, 2.0, 5.0, 2.0])
    least = np.flatnonzero(values <= values.min())
    assert runners_up(values, least, 3) == ((1, 2.0), (2, 2.0), (4, 2.0))
    assert runners_up(values, least, 1) == ((3, 0.0), (2, 2.0), (4, 2.0))
    assert runners_up(values[:1], least[:0], 0) == ()


@given(st.lists(st.integers(0, 5), min_size=1, max_size=30), st.lists(st.sampled_from([0.0, 1.0, 1.0 + 1e-12, 2.0]),
                                                                     min_size=6, max_size=6), st.data())
def test_runners_up_by_state_are_the_runners_up_by_candidate(sids, costs, data):
    # per state (a score cache's answer) as per candidate, rounding ties included
    from tidal_placement.gpu_candidates import StateScores
    from tidal_placement.ranking import least, runners_up, runners_up_of_states

    scores = StateScores(np.array(sids), np.array(costs))
    values = scores.cost[scores.sids]
    chosen = data.draw(st.integers(0, len(sids) - 1))
    assert runners_up_of_states(scores, chosen) == runners_up(values, np.flatnonzero(least(values)), chosen)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=300), st.lists(st.sampled_from([0.0, 1.0, 1.0 + 1e-12]),
                                                                      min_size=6, max_size=6),
       st.lists(st.sampled_from([0.0, 1.0]), min_size=6, max_size=6), st.data())
def test_tied_states_are_the_candidates_tied_on_every_key(sids, costs, tiebreak, data):
    # the state-level narrowing (one state compared, or a table of several) against the keys per candidate;
    # the states at the least cost it hands on give the runners-up found without them
    from tidal_placement.gpu_candidates import StateScores
    from tidal_placement.ranking import least, runners_up_of_states, tied_states

    scores = StateScores(np.array(sids), np.array(costs), tiebreaks=(np.array(tiebreak),))
    rows = np.arange(len(sids))
    for key in (scores.cost[scores.sids], scores.tiebreaks[0][scores.sids]):
        rows = rows[least(key[rows])]
    tied, cheapest = tied_states(scores)
    assert tied.tolist() == rows.tolist()
    present = np.unique(sids)
    assert sorted(cheapest.tolist()) == present[least(scores.cost[present])].tolist()
    chosen = data.draw(st.integers(0, len(sids) - 1))
    assert runners_up_of_states(scores, chosen, cheapest) == runners_up_of_states(scores, chosen)


@given(st.integers(1, 3).flatmap(lambda k: st.lists(st.lists(st.integers(-2**19, 2**19 - 1), min_size=k, max_size=k),
                                                    min_size=1, max_size=80)))
def test_packed_keys_order_and_tie_as_the_keys_compared_in_turn(rows):
    # both ways of packing (a few values in plain Python, many as arrays) against tuple order
    from tidal_placement.ranking import FEW_PACKED, pack_keys

    keys = [np.array(column, dtype=np.float64) for column in zip(*rows)]
    packed = pack_keys(keys).tolist()
    order = sorted(range(len(rows)), key=lambda j: (tuple(rows[j]), j))
    assert sorted(range(len(rows)), key=lambda j: (packed[j], j)) == order
    assert [packed[i] == packed[j] for i in order for j in order] == \
        [rows[i] == rows[j] for i in order for j in order]
    many = [np.tile(key, FEW_PACKED + 1) for key in keys]
    assert pack_keys(many).tolist() == packed * (FEW_PACKED + 1)


@pytest.mark.parametrize("bad", [0.5, np.nan, np.inf, -np.inf, 2.0**29, -2.0**29 - 1])
@pytest.mark.parametrize("copies", [1, 40])
def test_keys_that_are_not_small_whole_numbers_do_not_pack(bad, copies):
    # a fraction, NaN or infinity, or a number past 30 bits (rounding could tie it with its neighbour)
    from tidal_placement.ranking import pack_keys

    assert pack_keys([np.full(copies, bad)]) is None
    assert pack_keys([np.zeros(copies), np.full(copies, bad)]) is None
    assert pack_keys([np.full(copies, 2.0**29 - 1)]) is not None


@given(st.lists(st.integers(0, 5), min_size=1, max_size=300), st.lists(st.integers(-3, 3), min_size=6, max_size=6),
       st.lists(st.integers(0, 2), min_size=6, max_size=6), st.data())
def test_packed_keys_tie_and_rank_runners_up_as_the_keys_themselves(sids, costs, tiebreak, data):
    from tidal_placement.gpu_candidates import StateScores
    from tidal_placement.ranking import pack_keys, runners_up_of_states, tied_states

    cost, second = np.array(costs, dtype=np.float64), np.array(tiebreak, dtype=np.float64)
    plain = StateScores(np.array(sids), cost, tiebreaks=(second,))
    packed = plain._replace(packed=pack_keys([cost, second])[plain.sids])
    assert tied_states(packed)[0].tolist() == tied_states(plain)[0].tolist()
    chosen = data.draw(st.integers(0, len(sids) - 1))
    assert runners_up_of_states(packed, chosen) == runners_up_of_states(plain, chosen)
