"""Scheduler cache: node rows from topology events, assume / forget /
confirm / release, refusals that keep every free figure ≥ 0."""

from __future__ import annotations

import pytest

from tidal_placement.cluster_state import NONE_FLOATING, Allocation, ClusterState, Floating
from tidal_simulator.topology_builder import make_topology
from tidal_schemas import NodeScore, Resources

from builders import T0


def cluster(*topologies) -> ClusterState:
    state = ClusterState(capacity=2)
    for t in topologies:
        state.upsert_node(t)
    return state


def free(state: ClusterState, node: str) -> dict:
    r = state.rows[node]
    n, g = int(state.numa_count[r]), len(state.specs[r].gpu_ids)
    return {"cpu": int(state.cpu_free[r]), "mem": int(state.mem_free[r]),
            "numa": state.numa_free[r, :n].tolist(), "gpu": state.gpu_free[r, :g].tolist()}


def test_rows_are_built_from_topology():
    # 2 NUMA × 8 CPUs, CPU 3 reserved (on NUMA 0): NUMA allocatable 7 + 8,
    # node allocatable 16000 − 1000 = 15000 m; 2 GPUs, one unhealthy.
    state = cluster(make_topology("n1", (8, 8), gpus=2, reserved=(3,), unhealthy=(1,), memory_mib=4096))
    assert free(state, "n1") == {"cpu": 15000, "mem": 4096, "numa": [7, 8], "gpu": [1000, 0]}
    r = state.rows["n1"]
    assert bool(state.exclusive_ok[r]) and bool(state.schedulable[r])
    assert state.models[state.gpu_model[r]] == "A100"
    assert (int(state.gpu_idle[r]), int(state.gpu_whole[r]), int(state.gpu_max[r])) == (1000, 1, 1000)


@pytest.mark.parametrize("exclusive, expected", [(True, True), (False, False)])
def test_exclusive_capability_needs_per_numa_figures(exclusive, expected):
    state = cluster(make_topology("n1", (4, 4), exclusive=exclusive))
    assert bool(state.exclusive_ok[state.rows["n1"]]) is expected


def test_rows_grow_past_the_initial_capacity_and_are_reused():
    state = cluster(*(make_topology(f"n{i}", (4,)) for i in range(5)))  # capacity 2 → 8
    assert state.capacity >= 5 and [state.names[state.rows[f"n{i}"]] for i in range(5)] == [f"n{i}" for i in range(5)]
    row = state.rows["n2"]
    assert state.remove_node("n2") == []
    assert not state.present[row]
    state.upsert_node(make_topology("n9", (4,)))
    assert state.rows["n9"] == row and bool(state.present[row])


@pytest.mark.parametrize("allocation, expected", [
    # 2 exclusive CPUs on NUMA 1 + 512 MiB + half of gpu0:
    # cpu 16000−2000, mem 4096−512, numa [8, 8−2], gpu [1000−500, 1000]
    (Allocation.of("n1", 2000, 512, {1: 2}, {"gpu0": 500}),
     {"cpu": 14000, "mem": 3584, "numa": [8, 6], "gpu": [500, 1000]}),
    # a shared-pool pod: node CPU and memory only
    (Allocation.of("n1", 1500, 100), {"cpu": 14500, "mem": 3996, "numa": [8, 8], "gpu": [1000, 1000]}),
    # two whole GPUs
    (Allocation.of("n1", 0, 0, None, {"gpu0": 1000, "gpu1": 1000}),
     {"cpu": 16000, "mem": 4096, "numa": [8, 8], "gpu": [0, 0]}),
])
def test_assume_deducts_and_forget_returns_exactly(allocation, expected):
    state = cluster(make_topology("n1", (8, 8), gpus=2, memory_mib=4096))
    before = free(state, "n1")
    assert state.assume("p", allocation).ok
    assert free(state, "n1") == expected
    assert state.forget("p") == allocation
    assert free(state, "n1") == before  # usable again at once


@pytest.mark.parametrize("allocation, reason", [
    (Allocation.of("n1", 9000), "cpu"),                         # 9000 > 8000 m free
    (Allocation.of("n1", 0, 5000), "memory"),                    # 5000 > 4096 MiB
    (Allocation.of("n1", 5000, 0, {0: 5}), "numa 0"),            # 5 > 4 exclusive CPUs on NUMA 0
    (Allocation.of("n1", 1000, 0, {7: 1}), "numa 7"),            # no NUMA 7
    (Allocation.of("n1", 0, 0, None, {"gpu0": 1001}), "GPU gpu0"),  # 1001 > 1000 milli
    (Allocation.of("n1", 0, 0, None, {"gpu5": 10}), "unknown GPU"),
    (Allocation.of("nx", 1000), "unknown node"),
])
def test_assume_refuses_without_changing_anything(allocation, reason):
    state = cluster(make_topology("n1", (4, 4), gpus=1, memory_mib=4096))
    before = free(state, "n1")
    outcome = state.assume("p", allocation)
    assert not outcome.ok and reason in outcome.reason
    assert free(state, "n1") == before and state.held("p") is None


@pytest.mark.parametrize("second, reason", [
    (Allocation.of("n1", 1000, 0, {0: 2}), "numa 0"),          # 2 > 4 − 3 exclusive CPUs left on NUMA 0
    (Allocation.of("n1", 4500), "cpu"),                         # 4500 > 8000 − 4000 m left
    (Allocation.of("n1", 0, 3000), "memory"),                   # 3000 > 4096 − 1100 MiB left
    (Allocation.of("n1", 0, 0, None, {"gpu0": 500}), "GPU gpu0"),  # 500 > 1000 − 600 milli left
])
def test_assume_counts_what_is_held_on_a_partly_used_node(second, reason):
    # Each refusal on a node the first pod holds part of: a check against the node's allocatable
    # instead of what is left passes on an empty node and fails here.
    state = cluster(make_topology("n1", (4, 4), gpus=1, memory_mib=4096))
    assert state.assume("first", Allocation.of("n1", 4000, 1100, {0: 3}, {"gpu0": 600})).ok
    before = free(state, "n1")
    assert before == {"cpu": 4000, "mem": 2996, "numa": [1, 4], "gpu": [400]}
    outcome = state.assume("second", second)
    assert not outcome.ok and reason in outcome.reason
    assert free(state, "n1") == before and state.held("second") is None
    assert state.assume("third", Allocation.of("n1", 1000, 0, {0: 1})).ok  # the one CPU left on NUMA 0 fits


def test_double_assume_is_refused():
    state = cluster(make_topology("n1", (4,)))
    assert state.assume("p", Allocation.of("n1", 1000)).ok
    outcome = state.assume("p", Allocation.of("n1", 1000))
    assert not outcome.ok and "already held" in outcome.reason
    assert free(state, "n1")["cpu"] == 3000  # 4000 − 1000, deducted once


def test_exclusive_cpus_refused_on_a_node_without_numa_figures():
    state = cluster(make_topology("n1", (4, 4), exclusive=False))
    outcome = state.assume("p", Allocation.of("n1", 1000, 0, {0: 1}))
    assert not outcome.ok and "no exclusive CPUs" in outcome.reason


def test_shares_of_one_gpu_pack_until_full_then_refuse():
    # 300 + 700 = 1000 fills gpu0; one more milli is refused
    state = cluster(make_topology("n1", (4,), gpus=1))
    assert state.assume("a", Allocation.of("n1", gpus={"gpu0": 300})).ok
    assert state.assume("b", Allocation.of("n1", gpus={"gpu0": 700})).ok
    assert free(state, "n1")["gpu"] == [0]
    assert not state.assume("c", Allocation.of("n1", gpus={"gpu0": 1})).ok


def test_confirm_then_forget_is_a_no_op_but_release_returns():
    state = cluster(make_topology("n1", (4,)))
    state.assume("p", Allocation.of("n1", 2000))
    assert state.confirm("p").ok
    assert state.forget("p") is None and free(state, "n1")["cpu"] == 2000
    assert state.release("p") == Allocation.of("n1", 2000) and free(state, "n1")["cpu"] == 4000
    assert not state.confirm("p").ok and state.release("p") is None


@pytest.mark.parametrize("allocatable_cpu, expected_free", [
    (12000, 10000),  # oversold 8000 → 12000, 2000 held → 10000
    (1000, 0),       # lowered below what is held: clamped at 0, never negative
])
def test_set_allocatable_changes_node_level_only(allocatable_cpu, expected_free):
    state = cluster(make_topology("n1", (4, 4), memory_mib=1024))
    state.assume("p", Allocation.of("n1", 2000, 0, {0: 2}))
    assert state.set_allocatable("n1", Resources(cpu_milli=allocatable_cpu, memory_mib=1024)).ok
    assert free(state, "n1")["cpu"] == expected_free
    assert free(state, "n1")["numa"] == [2, 4]  # NUMA figures are never oversold
    assert not state.assume("q", Allocation.of("n1", expected_free + 1)).ok


def test_blocked_reasons_stack():
    state = cluster(make_topology("n1", (4,)))
    r = state.rows["n1"]
    state.set_blocked("n1", "taint")
    state.set_blocked("n1", "stale")
    state.set_blocked("n1", "taint", blocked=False)
    assert not state.schedulable[r]
    state.set_blocked("n1", "stale", blocked=False)
    assert state.schedulable[r]


def test_node_score_sets_loads_and_numa_order():
    state = cluster(make_topology("n1", (4, 4, 4)))
    assert state.apply_node_score(NodeScore(node="n1", load=0.5, numa_load={0: 0.9, 1: 0.1, 2: 0.5},
                                            sampled_at=T0)).ok
    r = state.rows["n1"]
    assert state.numa_order[r, :3].tolist() == [1, 2, 0]  # loads 0.1 < 0.5 < 0.9
    assert state.node_load[r] == 0.5
    state.update_load("n1", {0: 0.0, 1: 0.3, 2: 0.6})
    assert state.node_load[r] == pytest.approx(0.3)  # mean of 0.0, 0.3, 0.6


def test_reported_again_keeps_held_pods_by_id():
    state = cluster(make_topology("n1", (4, 4), gpus=2))
    state.assume("p", Allocation.of("n1", 2000, 0, {1: 2}, {"gpu1": 1000}))
    state.upsert_node(make_topology("n1", (4, 4), gpus=2))
    assert free(state, "n1") == {"cpu": 6000, "mem": 65536, "numa": [4, 2], "gpu": [1000, 0]}


def test_removing_a_node_parks_its_pods_until_it_comes_back():
    state = cluster(make_topology("n1", (4,)), make_topology("n2", (4,)))
    state.assume("a", Allocation.of("n1", 1000))
    state.assume("b", Allocation.of("n2", 1000))
    assert state.remove_node("n1") == ["a"]
    assert state.held("a") is not None and state.held("b") is not None
    state.upsert_node(make_topology("n1", (4,)))
    assert free(state, "n1")["cpu"] == 3000


def test_a_recorded_pod_on_an_unknown_node_counts_once_the_node_arrives():
    state = cluster()
    outcome = state.record("p", Allocation.of("n1", 2000, 512, {1: 2}, {"gpu0": 500}))
    assert outcome.ok and "not known yet" in outcome.reason
    state.upsert_node(make_topology("n1", (8, 8), gpus=2, memory_mib=4096))
    assert free(state, "n1") == {"cpu": 14000, "mem": 3584, "numa": [8, 6], "gpu": [500, 1000]}
    assert state.release("p") is not None
    assert free(state, "n1") == {"cpu": 16000, "mem": 4096, "numa": [8, 8], "gpu": [1000, 1000]}


def test_record_is_unchecked_and_replaces_what_the_pod_held():
    state = cluster(make_topology("n1", (2,), memory_mib=1024))
    assert state.record("big", Allocation.of("n1", 5000, 4096, {0: 2})).ok  # the cluster runs it: it counts
    assert free(state, "n1")["cpu"] == 0 and free(state, "n1")["numa"] == [0]
    state.record("big", Allocation.of("n1", 1000))
    assert free(state, "n1")["cpu"] == 1000 and free(state, "n1")["numa"] == [2]


def test_floating_devices_are_counted_and_give_way_to_named_ones_in_any_order():
    topology = make_topology("n1", (4, 4), gpus=4)
    foreign = ("f", Allocation.of("n1", 500), Floating(gpus=(1000,), exclusive_cpus=0))
    tidal = ("t", Allocation.of("n1", 1000, 0, {1: 2}, {"gpu3": 1000}), NONE_FLOATING)
    lost = ("l", Allocation.of("n1", 2000), Floating(gpus=(300,), exclusive_cpus=3))
    results = []
    for order in ([foreign, tidal, lost], [lost, tidal, foreign], [tidal, lost, foreign]):
        state = cluster(make_topology("n1", (4, 4), gpus=4)) if order[0] is not lost else cluster()
        for key, allocation, floating in order:
            state.record(key, allocation, floating)
        if "n1" not in state.rows:
            state.upsert_node(topology)
        results.append(free(state, "n1"))
    assert results[0] == results[1] == results[2]
    # gpu3 named by t; the foreign whole GPU floats to gpu2, the share to gpu1;
    # 3 exclusive CPUs from the NUMA node with most free (NUMA 0: 4), t holds 2 of NUMA 1
    assert results[0] == {"cpu": 8000 - 3500, "mem": results[0]["mem"], "numa": [1, 2], "gpu": [1000, 700, 0, 0]}
    state.release("f")
    assert free(state, "n1")["gpu"] == [1000, 1000, 700, 0]  # the share moves up once room frees


def test_a_recorded_pod_naming_ids_its_node_lacks_counts_what_it_can():
    state = cluster(make_topology("n1", (4, 4), gpus=1))
    assert state.record("p", Allocation.of("n1", 1000, 0, {0: 1, 99: 2}, {"gpu0": 500, "gpu-x": 1000})).ok
    assert free(state, "n1")["numa"] == [3, 4] and free(state, "n1")["gpu"] == [500]
    state.release("p")
    assert free(state, "n1")["numa"] == [4, 4] and free(state, "n1")["gpu"] == [1000]


def test_blocked_masks_follow_every_change_of_a_reason():
    """The masks are kept between decisions: each change must still show."""
    from tidal_cli.sample import node as sample_node

    state = ClusterState()
    for name in ("a", "b", "c"):
        state.upsert_node(sample_node(name, 1, 2, 4, 0, 1024, reserved=0))
    assert state.blocked_masks(3) == []
    state.set_blocked("b", "tainted")
    (reason, mask), = state.blocked_masks(3)
    assert reason == "tainted" and mask.tolist() == [True, False, True] and not mask.flags.writeable
    assert state.blocked_masks(3)[0][1] is mask  # kept while nothing changes
    state.set_blocked("b", "tainted")  # again: no change
    assert state.blocked_masks(3)[0][1] is mask
    state.set_blocked("c", "stale")
    assert [(r, m.tolist()) for r, m in state.blocked_masks(3)] == \
        [("stale", [True, True, False]), ("tainted", [True, False, True])]
    assert [(r, m.tolist()) for r, m in state.blocked_masks(2)] == [("tainted", [True, False])]  # c is row 2
    state.set_blocked("b", "tainted", blocked=False)
    assert [(r, m.tolist()) for r, m in state.blocked_masks(3)] == [("stale", [True, True, False])]
    state.remove_node("c")
    assert state.blocked_masks(3) == []
