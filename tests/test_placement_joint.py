"""The joint strategy (issue 56): a window's answer is never worse than
deciding its pods one by one, planning leaves the cache as it was, an
answer the cache refuses is never published, and the cycle and the openb
replay decide windows through it; the allocation bound holds every
strategy's result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import pod
from tidal_placement.cache import ClusterCache
from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.cycle import cycle
from tidal_placement.decide import PodRequest, decide
from tidal_placement.gpu_joint import JointStrategy, WindowPlan, Trial, measure, per_pod
from tidal_placement.gpu_strategies import make_strategy
from tidal_placement.gpu_workload import Shape, TargetWorkload
from tidal_placement.pod_request import Placement
from tidal_schemas import GpuAsk
from tidal_simulator.openb import read_nodes, read_pods
from tidal_simulator.openb_bound import allocation_bound
from tidal_simulator.openb_replay import arrival_sequence, replay
from tidal_simulator.topology_builder import make_topology
from tidal_placement.gpu_frag import FragModel
from tidal_placement.gpu_workload import typical_workload

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "openb_sample"
WORKLOAD = TargetWorkload((Shape(4000, 500, 1), Shape(8000, 1000, 1), Shape(16000, 1000, 2), Shape(4000)),
                          np.array([0.4, 0.3, 0.2, 0.1]))


def cluster(nodes) -> ClusterState:
    """nodes: (CPUs, GPUs) each."""
    state = ClusterState()
    for i, (cpus, gpus) in enumerate(nodes):
        state.upsert_node(make_topology(f"n{i}", (cpus,), gpus=gpus))
    return state


def figures(state: ClusterState) -> tuple:
    n = state.size
    return (state.cpu_free[:n].tolist(), state.mem_free[:n].tolist(), state.gpu_free[:n].tolist(),
            sorted(state.holdings()))


def test_registry_and_options():
    joint = make_strategy("joint", WORKLOAD)
    assert isinstance(joint, JointStrategy) and joint.window == 64 and per_pod(joint) is joint.base
    assert per_pod(joint.base) is joint.base
    assert make_strategy("joint", WORKLOAD, window=4, orders="gpu").orders == ("gpu",)
    for options, problem in (({"window": 0}, "at least 1"), ({"orders": "gpu+size"}, "orders"),
                             ({"base": "joint"}, "its own base"), ({"solver": "mip"}, "solver")):
        with pytest.raises(ValueError, match=problem):
            make_strategy("joint", WORKLOAD, **options)
    with pytest.raises(ValueError, match="target workload"):
        make_strategy("joint")


pods_st = st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.sampled_from([250, 500, 1000]),
                             st.sampled_from([1000, 4000, 8000, 16000])), min_size=2, max_size=8)
nodes_st = st.lists(st.tuples(st.sampled_from([8, 16, 32]), st.sampled_from([1, 2, 4])), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(nodes_st, pods_st, st.booleans())
def test_a_window_is_never_worse_than_its_pods_one_by_one_and_planning_changes_nothing(nodes, pods, keep):
    state = cluster(nodes)
    joint = make_strategy("joint", WORKLOAD, keep_placed=keep)
    requests = [PodRequest(f"p{i}", cpu, gpu_count=count, gpu_milli=milli if count else 1000)
                for i, (count, milli, cpu) in enumerate(pods)]
    before = figures(state)
    plan = joint.plan(state, requests, lambda: lambda j: decide(state, requests[j], joint.base))
    assert figures(state) == before  # every trial undone
    required = frozenset(plan.queue.placed) if keep else frozenset()
    assert plan.chosen.key(required) <= plan.queue.key(required)
    assert plan.chosen.gpu_milli >= plan.queue.gpu_milli
    if keep:
        assert plan.queue.placed.keys() <= plan.chosen.placed.keys()
    # one by one, in queue order, gives exactly the queue trial
    for i, request in enumerate(requests):
        one = decide(state, request, joint.base)
        if one.ok and state.assume(request.key, one.allocation).ok:
            assert plan.queue.placed[i].allocation == one.allocation
        else:
            assert i not in plan.queue.placed
    for request in requests:
        state.release(request.key)
    # the chosen answer, taken in its order, is accepted by the cache as it is
    assert sorted(plan.order) == list(range(len(requests)))
    for i in plan.order:
        if i in plan.chosen.placed:
            assert state.assume(requests[i].key, plan.chosen.placed[i].allocation).ok


def gpu_cache() -> ClusterCache:
    cache = ClusterCache("c1", permit_timeout_s=30.0, stale_after_s=0.0)
    for i, gpus in enumerate((1, 2, 2)):
        assert cache.apply(make_topology(f"n{i}", (32,), gpus=gpus), 0.0)
    asks = [(1, 500), (2, 1000), (1, 1000), (1, 250), (2, 1000), (1, 500)]
    for i, (count, milli) in enumerate(asks):
        cache.apply(pod(f"p{i}", cpu_milli=2000, gpu=GpuAsk(count=count, milli=milli)), 0.0)
    return cache


def test_the_cycle_decides_a_window_through_the_plan_and_books_what_it_publishes():
    per_pod_cache, joint_cache = gpu_cache(), gpu_cache()
    alone = [d for d in cycle(per_pod_cache, make_strategy("fgd-cpu", WORKLOAD), 1.0) if d.outcome == "placed"]
    joint = make_strategy("joint", WORKLOAD)
    together = [d for d in cycle(joint_cache, joint, 1.0) if d.outcome == "placed"]
    milli = lambda ds: sum(g.milli for d in ds for g in d.gpus)  # noqa: E731
    assert milli(together) >= milli(alone) > 0
    assert {d.name for d in alone} <= {d.name for d in together}
    for d in together:  # what is published is what the cache holds
        held = joint_cache.state.held(f"default/{d.name}")
        assert held is not None and held.node == d.node and dict(held.gpus) == {g.gpu: g.milli for g in d.gpus}


class Refused(JointStrategy):
    """A joint strategy whose solver answers the impossible: every pod on n0's one GPU."""

    def plan(self, state, requests, new_decider):
        fake = {i: Placement(True, node="n0", row=state.rows["n0"],
                             allocation=Allocation.of("n0", 1000, 0, {}, {"gpu0": 1000}))
                for i in range(len(requests))}
        trial = Trial(tuple(range(len(requests))), fake, 1000 * len(requests), 0.0)
        return WindowPlan(trial, trial, 1)


def test_an_answer_the_cache_refuses_is_never_published():
    cache = ClusterCache("c1", permit_timeout_s=30.0, stale_after_s=0.0)
    assert cache.apply(make_topology("n0", (8,), gpus=1), 0.0)
    for name in ("a", "b", "c"):
        cache.apply(pod(name, cpu_milli=1000, gpu=GpuAsk(count=1, milli=1000)), 0.0)
    base = make_strategy("fgd-cpu", WORKLOAD)
    codes: list[str] = []
    decisions = list(cycle(cache, Refused(base, FragModel(WORKLOAD)), 1.0, attempted=codes.append))
    placed = [d for d in decisions if d.outcome == "placed"]
    assert len(placed) == 1 and codes.count("error") == 2  # the first fits; the cache refuses the other two
    assert cache.state.gpu_free[cache.state.rows["n0"], 0] == 0
    assert sorted(cache.state.holdings()) == [f"default/{placed[0].name}"]


def test_the_replay_decides_in_windows_and_the_bound_holds_every_strategy():
    nodes, pods = read_nodes(SAMPLE / "node_list.csv"), read_pods(SAMPLE / "pod_list.csv")
    workload = typical_workload([p.shape for p in pods])
    capacity = 1000 * sum(n.gpus for n in nodes)
    sequence = arrival_sequence(pods, 1, capacity, 1.3)
    results = {}
    for name in ("fgd-cpu", "joint"):
        log = replay(nodes, sequence, make_strategy(name, workload, **({"window": 4} if name == "joint" else {})),
                     FragModel(workload))
        results[name] = log
    arrived = 0
    last = 0
    for i, p in enumerate(sequence):
        arrived += p.gpu_total
        if round(100 * arrived / capacity) <= 100:
            last = i + 1
    bound = allocation_bound(nodes, sequence[:last])
    for log in results.values():
        assert log.allocated[last - 1] <= bound.gpu_milli + 1e-6
        assert log.allocated[-1] <= capacity
    # nothing is placed beyond capacity, and every line counts only its own pods
    assert results["joint"].allocated.max() <= capacity
    assert (np.diff(results["joint"].arrived) >= 0).all()


def test_the_bound_sees_what_no_placement_can_do():
    from tidal_simulator.openb import TraceNode, TracePod

    nodes = [TraceNode("a", 8000, 65536, 2, "T4")]
    # a 2-GPU pod needing more CPU than the node has, and a T4-barred pod: neither can place
    pods = [TracePod("big", 16000, 1024, 2, 1000), TracePod("v100", 1000, 1024, 1, 1000, ("V100M16",)),
            TracePod("ok", 4000, 1024, 1, 500)]
    bound = allocation_bound(nodes, pods)
    assert bound.gpu_milli == pytest.approx(500.0) and bound.alloc_pct == pytest.approx(25.0)


def test_another_solvers_answer_is_measured_through_the_cache_and_refused_whole_when_infeasible():
    state = cluster([(8, 1), (8, 1)])
    requests = [PodRequest(f"p{i}", 1000, gpu_count=1, gpu_milli=1000) for i in range(2)]
    before = figures(state)
    one_gpu = lambda node: Placement(True, node=node, row=state.rows[node],  # noqa: E731
                                     allocation=Allocation.of(node, 1000, 0, {}, {state.gpu_id(state.rows[node], 0): 1000}))
    frag = FragModel(WORKLOAD)
    # both on n0's one GPU: the cache refuses the second, so the answer is refused whole
    assert measure(state, requests, (0, 1), {0: one_gpu("n0"), 1: one_gpu("n0")}, frag) is None
    assert figures(state) == before
    trial = measure(state, requests, (0, 1), {0: one_gpu("n0"), 1: one_gpu("n1")}, frag)
    assert trial is not None and trial.gpu_milli == 2000 and set(trial.placed) == {0, 1}
    assert figures(state) == before  # measured, then undone


@settings(max_examples=25, deadline=None)
@given(nodes_st, pods_st)
def test_the_cpsat_window_is_never_worse_than_the_joint_search_and_its_answer_fits(nodes, pods):
    pytest.importorskip("ortools")
    from tidal_placement.gpu_joint_cpsat import with_cpsat

    state = cluster(nodes)
    joint = make_strategy("joint", WORKLOAD)
    solver = with_cpsat(joint, k=3, seconds=0.05)
    requests = [PodRequest(f"p{i}", cpu, gpu_count=count, gpu_milli=milli if count else 1000)
                for i, (count, milli, cpu) in enumerate(pods)]
    before = figures(state)
    decider = lambda: lambda j: decide(state, requests[j], joint.base)  # noqa: E731
    warm = joint.plan(state, requests, decider)
    plan = solver.plan(state, requests, decider)
    assert figures(state) == before
    required = frozenset(plan.queue.placed)
    assert plan.chosen.key(required) <= warm.chosen.key(required)
    again = solver.plan(state, requests, decider)  # deterministic: the same answer twice
    allocations = lambda p: {i: c.allocation for i, c in p.chosen.placed.items()}  # noqa: E731
    assert allocations(again) == allocations(plan)
    for i in plan.order:
        if i in plan.chosen.placed:
            assert state.assume(requests[i].key, plan.chosen.placed[i].allocation).ok
