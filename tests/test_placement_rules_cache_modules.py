"""Direct tests of the cache's modules no other test imports: `node_spec`
(what a topology becomes), `cluster_nodes` (allocatable, blocked reasons,
loads, reads by name), `floating` (where unnamed devices are charged),
`node_states` (distinct node states for a score cache) and
`gpu_joint_taken` (a joint window's trials on the cache)."""

from __future__ import annotations

import numpy as np
import pytest

from tidal_placement.cluster_nodes import ClusterNodes
from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.floating import place_floating
from tidal_placement.allocation import Floating
from tidal_placement.gpu_frag import FragModel
from tidal_placement.gpu_joint_taken import Taken, Trial, measure
from tidal_placement.gpu_workload import Shape, typical_workload
from tidal_placement.node_spec import node_spec
from tidal_placement.node_states import NodeStates
from tidal_placement.pod_request import PodRequest
from tidal_placement.decide import decide
from tidal_schemas import Gpu, NodeScore, Resources

from builders import T0
from placement_builders import cluster, free, node, use

# ---- node_spec --------------------------------------------------------------------------------------


def test_node_spec_per_numa_exclusive_cpus():
    # 2 NUMA × 4 CPUs, CPU 1 reserved (NUMA 0): allocatable per NUMA 4 − 1 = 3 and 4; node 8000 − 1000 m
    spec = node_spec(node("n", (4, 4), reserved=(1,), memory_mib=2048))
    assert (spec.numa_ids, spec.numa_cpus, spec.exclusive) == ((0, 1), (3, 4), True)
    assert (spec.cpu_milli, spec.memory_mib) == (7000, 2048)


def test_node_spec_without_per_numa_figures_offers_no_exclusive_cpus():
    # no allocatable_cpus reported: the NUMA node's CPUs less the reserved ones there, 4 − 1 = 3; not exclusive
    spec = node_spec(node("n", (4, 4), reserved=(5,), exclusive=False))
    assert (spec.numa_cpus, spec.exclusive) == ((4, 3), False)


def test_node_spec_without_numa_nodes_has_one_pseudo_numa_node():
    # all 6000 m on NUMA 0: 6 CPUs, for §E to rank
    t = node("n", (6,))
    spec = node_spec(t.model_copy(update={"numa_nodes": [], "cpus": []}))
    assert (spec.numa_ids, spec.numa_cpus, spec.exclusive) == ((0,), (6,), False)


def test_node_spec_gpus_in_index_order_and_the_most_common_model():
    gpus = [Gpu(id="g2", index=2, model="T4"), Gpu(id="g0", index=0, model="A100"),
            Gpu(id="g1", index=1, model="T4", healthy=False)]
    spec = node_spec(node("n", (4,)).model_copy(update={"gpus": gpus}))
    assert spec.gpu_ids == ("g0", "g1", "g2") and spec.gpu_healthy == (True, False, True)
    assert spec.model == "T4" and not spec.sliced  # 2 T4 of 3; each GPU its own root
    assert node_spec(node("m", (4,))).model is None
    tie = node_spec(node("n", (4,)).model_copy(update={"gpus": gpus[:2]}))
    assert tie.model == "A100"  # one each: the first by name


def test_node_spec_a_vgpu_is_a_slice_of_its_parent():
    spec = node_spec(node("n", (4,), gpus=1, virtual=2))
    assert spec.gpu_ids == ("gpu0", "vgpu0", "vgpu1") and spec.gpu_virtual == (False, True, True)
    assert spec.sliced and spec.gpu_roots[1:] == (0, 0)


# ---- cluster_nodes ----------------------------------------------------------------------------------

def test_cluster_state_is_cluster_nodes():
    assert issubclass(ClusterState, ClusterNodes)


@pytest.mark.parametrize("used", [0, 3000])
def test_book_sets_allocatable_and_free_follows(used):
    # oversold to 12000 m: free = 12000 − held; lowered to 2000 below what is held: free 0, never negative
    state = cluster(node("n", (4, 4), memory_mib=4096))
    if used:
        use(state, "n", cpu=used, mem=1000)
    assert state.figures("n") == ((8000, 4096), (8000, 4096))
    assert state.book("n", 12000, 8192).ok
    assert state.allocatable("n") == Resources(cpu_milli=12000, memory_mib=8192)
    assert state.figures("n") == ((12000, 8192), (8000, 4096))  # booked, and as the topology says
    assert (free(state, "n")["cpu"], free(state, "n")["mem"]) == (12000 - used, 8192 - (1000 if used else 0))
    assert state.set_allocatable("n", Resources(cpu_milli=2000, memory_mib=0)).ok
    assert free(state, "n")["cpu"] == (2000 - used if used < 2000 else 0)
    assert not state.book("x", 1, 1).ok and state.allocatable("x") is None and state.figures("x") is None


def test_blocked_reasons_and_their_masks():
    state = cluster(node("a", (4,)), node("b", (4,)), node("c", (4,)))
    assert state.set_blocked("b", "taint").ok and state.set_blocked("c", "stale").ok
    assert state.set_blocked("c", "taint").ok
    assert state.blocked("c") == {"stale", "taint"} and state.blocked("a") == frozenset()
    masks = state.blocked_masks(3)
    # per reason, sorted, the rows it leaves
    assert [(reason, mask.tolist()) for reason, mask in masks] == [("stale", [True, True, False]),
                                                                    ("taint", [True, False, False])]
    assert state.blocked_masks(3) is masks  # kept until a reason changes
    assert not masks[0][1].flags.writeable
    state.set_blocked("c", "taint", blocked=False)
    assert [(r, m.tolist()) for r, m in state.blocked_masks(3)] == [("stale", [True, True, False]),
                                                                    ("taint", [True, False, True])]
    assert state.schedulable[:3].tolist() == [True, False, False]
    assert not state.set_blocked("x", "taint").ok


def test_update_load_defaults_the_node_load_to_the_mean():
    # NUMA loads 0.2 and 0.6: node load (0.2 + 0.6) / 2 = 0.4 unless given; ids the node lacks are ignored
    state = cluster(node("n", (4, 4)))
    r = state.rows["n"]
    assert state.update_load("n", {0: 0.2, 1: 0.6, 7: 0.9}).ok
    assert float(state.node_load[r]) == pytest.approx(0.4)
    assert state.numa_order[r, :2].tolist() == [0, 1]
    assert state.apply_node_score(NodeScore(node="n", sampled_at=T0, load=0.9, numa_load={0: 0.7, 1: 0.1})).ok
    assert float(state.node_load[r]) == 0.9 and state.numa_order[r, :2].tolist() == [1, 0]  # re-ranked by load
    assert not state.update_load("x", {0: 0.1}).ok


def test_free_by_node_and_gpu_id():
    state = cluster(node("n", (4, 4), gpus=2, memory_mib=1024))
    use(state, "n", cpu=1000, mem=24, numa={1: 2}, gpus={"gpu1": 250})
    assert state.free_by_node() == {"n": {"cpu_milli": 7000, "memory_mib": 1000, "numa_cpus": {0: 4, 1: 2},
                                          "gpu_milli": {"gpu0": 1000, "gpu1": 750}}}
    assert state.gpu_id(state.rows["n"], 1) == "gpu1"


# ---- floating -----------------------------------------------------------------------------------------

def place(floats, used=(0, 0, 0), numa_used=(0, 0), valid=(True, True, True)):
    gpu_used, numa = np.array(used, dtype=np.int64), np.array(numa_used, dtype=np.int64)
    g = len(used)
    charges = place_floating(floats, gpu_used, np.array(valid), np.full(g, -1), np.full(g, 1000),
                             np.array([4, 4], dtype=np.int64), numa)
    return charges, gpu_used.tolist(), numa.tolist()


@pytest.mark.parametrize("floats, used, numa_used, charges", [
    # whole GPUs from the highest index down
    ([Floating((1000,))], (0, 0, 0), (0, 0), [("gpu", 2, 1000)]),
    ([Floating((1000, 1000))], (0, 0, 0), (0, 0), [("gpu", 2, 1000), ("gpu", 1, 1000)]),
    ([Floating((1000,))], (0, 0, 300), (0, 0), [("gpu", 1, 1000)]),        # GPU 2 partly held: the next free
    # a share on the fullest device with room: GPU 2 (300 held, 700 left ≥ 500) over the empty ones
    ([Floating((500,))], (0, 0, 300), (0, 0), [("gpu", 2, 500)]),
    ([Floating((800,))], (0, 0, 300), (0, 0), [("gpu", 1, 800)]),          # 700 < 800: an empty one, highest
    # exclusive CPUs from the NUMA node with most free (ties: lower column), across them when one is short
    ([Floating((), 3)], (0, 0, 0), (0, 0), [("numa", 0, 3)]),
    ([Floating((), 3)], (0, 0, 0), (2, 0), [("numa", 1, 3)]),             # free [2, 4]
    ([Floating((), 6)], (0, 0, 0), (1, 0), [("numa", 1, 4), ("numa", 0, 2)]),  # free [3, 4]: 4 then 2
    # what fits nowhere is charged all the same (on the freest), so never handed out
    ([Floating((), 9)], (0, 0, 0), (0, 0), [("numa", 0, 4), ("numa", 1, 4), ("numa", 0, 1)]),
    ([Floating((1000,))], (1000, 1000, 1000), (0, 0), [("gpu", 2, 1000)]),
])
def test_place_floating(floats, used, numa_used, charges):
    made, gpu_used, numa = place(floats, used, numa_used)
    assert made == charges
    # charged in place: what was used plus each charge
    expect_gpu, expect_numa = list(used), list(numa_used)
    for kind, col, amount in charges:
        (expect_gpu if kind == "gpu" else expect_numa)[col] += amount
    assert (gpu_used, numa) == (expect_gpu, expect_numa)


def test_a_floating_pod_is_counted_on_its_node():
    # a pod bound elsewhere holds 1 GPU and 3 exclusive CPUs Tidal cannot name: gpu1 and NUMA 0 charged
    state = cluster(node("n", (4, 4), gpus=2))
    assert state.record("default/foreign", Allocation.of("n", 3000), Floating((1000,), 3)).ok
    assert free(state, "n") == {"cpu": 5000, "mem": 65536, "numa": [1, 4], "gpu": [1000, 0]}
    state.release("default/foreign")
    assert free(state, "n") == {"cpu": 8000, "mem": 65536, "numa": [4, 4], "gpu": [1000, 1000]}


# ---- node_states ----------------------------------------------------------------------------------------

def test_nodes_in_the_same_figures_share_a_state():
    state = cluster(node("a", (4,), gpus=1), node("b", (4,), gpus=1), node("c", (8,), gpus=1))
    states = NodeStates(state)
    states.refresh()
    ra, rb, rc = (state.rows[n] for n in "abc")
    # a and b alike; c has 8000 m free: its own state
    assert states.row_state[[ra, rb, rc]].tolist() == [0, 0, 1] and len(states) == 2
    assert states.cpu_free[:2].tolist() == [4000, 8000]
    use(state, "b", cpu=1000, gpus={"gpu0": 500})
    states.refresh()
    assert states.row_state[rb] == 2 and len(states) == 3  # b changed: a state first met now
    assert states.plain_rows(np.array([2])) == [((500,) + (0,) * (state.gpu_cols - 1),
                                                 (True,) + (False,) * (state.gpu_cols - 1),
                                                 state.model_ids["A100"], 3000, 500)]
    compact = states.compacted()  # state 0 (a), 1 (c), 2 (b): all occupied, numbered as before
    assert len(compact) == 3
    state.release(next(iter(state.holdings())))  # b back to a's figures: state 2 is left empty
    states.refresh()
    compact = states.compacted()
    assert len(compact) == 2 and compact.row_state[[ra, rb, rc]].tolist() == [0, 0, 1]
    assert len(states) == 3  # the original keeps its numbering (a cycle may be reading it)


# ---- gpu_joint_taken ---------------------------------------------------------------------------------------

def test_trial_key_prefers_the_required_pods_then_more_gpu_then_less_fragmentation():
    # lower is better: (required not all placed, −milli-GPU placed, fragmentation added)
    a = Trial((0, 1), {0: None, 1: None}, 2000, 0.5)
    b = Trial((1, 0), {0: None, 1: None}, 2000, 0.25)
    c = Trial((0,), {0: None}, 3000, 0.0)
    required = frozenset({0, 1})
    assert sorted([a, b, c], key=lambda t: t.key(required)) == [b, a, c]  # c misses pod 1
    assert sorted([a, b, c], key=lambda t: t.key(frozenset({0}))) == [c, b, a]  # 3000 > 2000


def test_taken_holds_the_window_on_the_cache_and_undoes_it():
    state = cluster(node("a", (4,), gpus=2), node("b", (4,), gpus=2))
    use(state, "b", gpus={"gpu0": 1000})
    before = state.free_by_node()
    frag = FragModel(typical_workload([Shape(1000, 1000, 1)]))
    requests = [PodRequest(f"default/w{i}", cpu_milli=1000, gpu_count=1) for i in range(3)]
    taken = Taken(state, requests, frag)
    for i in range(3):  # each decided on the cache as the earlier ones left it
        assert taken.take(i, decide(state, requests[i]))
    assert not taken.take(0, decide(state, PodRequest("default/w0", cpu_milli=1000, gpu_count=1)))  # held already
    # three whole GPUs of the three free: 3000 milli-GPU; the fragmentation added on the rows touched
    trial = taken.trial((2, 1, 0))
    assert trial.gpu_milli == 3000 and set(trial.placed) == {0, 1, 2}
    assert trial.frag_added == pytest.approx(sum(taken.frag_at(r) - f for r, f in taken.before.items()))
    taken.undo()
    assert state.free_by_node() == before


def test_measure_takes_another_solvers_answer_or_refuses_it():
    state = cluster(node("a", (4,), gpus=1))
    frag = FragModel(typical_workload([Shape(1000, 1000, 1)]))
    requests = [PodRequest(f"default/w{i}", cpu_milli=1000, gpu_count=1) for i in range(2)]
    one = decide(state, requests[0])
    trial = measure(state, requests, (0, 1), {0: one}, frag)
    assert trial is not None and trial.gpu_milli == 1000 and trial.order == (0, 1)
    # both on the one GPU: the cache refuses the second, so the answer is never compared
    assert measure(state, requests, (0, 1), {0: one, 1: one}, frag) is None
    assert free(state, "a")["gpu"] == [1000]  # undone either way
