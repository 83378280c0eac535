"""Tenant rules that hold (issue 14 parts 5 and 6): permissions on every
path, quota per model or for all GPUs ("gpu"), refusals as their own
outcome, and a group choice that checks the whole pod. Each placement goes
through `allowance` then `decide`, as `PlacementService._place` does."""

from __future__ import annotations

import pytest

from builders import pod
from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.decide import decide, node_fit
from tidal_placement.gpu_groups import build_grouping
from tidal_placement.gpu_strategies import make_strategy
from tidal_placement.group_placement import GroupAsk, choose_group
from tidal_placement.pod_request import Placement, PodRequest
from tidal_placement.queue import SchedulingQueue
from tidal_placement.tenancy import allowance, can_take, tenant_usage
from tidal_schemas import GpuAsk, GpuBinding, GpuGroup, TenantConfig
from tidal_schemas.pod import AutoGrouping, TenantPermissions
from tidal_simulator.topology_builder import make_topology


def cluster(*topologies) -> tuple[ClusterState, dict]:
    state = ClusterState()
    for t in topologies:
        state.upsert_node(t)
    return state, {t.node: t.gpus for t in topologies}


def tenant(groups=(), quota=None, nodes=(), gpus=(), auto=None) -> TenantConfig:
    return TenantConfig(tenant="t1", quota=quota or {}, auto_grouping=auto,
                        groups=[GpuGroup(name=name, bindings=[GpuBinding(node=n, gpus=list(g)) for n, g in b.items()])
                                for name, b in groups],
                        permissions=TenantPermissions(nodes=list(nodes), gpus=list(gpus)))


def gpu_pod(name="p", count=1, models=(), cpu_milli=1000, **fields):
    return pod(name, tenant="t1", cpu_milli=cpu_milli, gpu=GpuAsk(count=count, models=list(models)), **fields)


def place(state, inventory, config, p, held=None) -> Placement:
    """`PlacementService._place` for one pod, then assume what it chose."""
    allowed = allowance(state, p, config, build_grouping(config, inventory), held or {})
    if allowed.reason:
        return Placement(False, reason=allowed.reason, refused=allowed.refused)
    placement = decide(state, PodRequest.from_pod(p), make_strategy("best-fit"), allowed=allowed.gpus,
                       nodes=allowed.nodes)
    if placement.ok:
        assert state.assume(p.event_key(), placement.allocation).ok
    return placement


def gpus_of(placement: Placement) -> list[str]:
    return [gpu for gpu, _ in placement.allocation.gpus]


# ---- permissions: every path ----------------------------------------------------

def test_permission_holds_when_every_group_is_filtered_away():
    # Allowed only gpu0; the group names gpu1..gpu3, so it is dropped and the
    # tenant places as one without groups — on gpu0 only, never gpu0..gpu3.
    state, inventory = cluster(make_topology("n1", gpus=4))
    config = tenant(groups=[("g", {"n1": ["gpu1", "gpu2", "gpu3"]})], gpus=["gpu0"])
    assert build_grouping(config, inventory).groups == ()
    first = place(state, inventory, config, gpu_pod("a"))
    assert first.ok and gpus_of(first) == ["gpu0"]
    second = place(state, inventory, config, gpu_pod("b"))   # gpu0 is taken: no room, not a refusal
    assert not second.ok and not second.refused
    assert not place(state, inventory, config, gpu_pod("c", count=2)).ok


def test_permitted_gpus_hold_without_groups():
    state, inventory = cluster(make_topology("n1", gpus=4))
    config = tenant(gpus=["gpu2", "gpu3"])
    placement = place(state, inventory, config, gpu_pod(count=2))
    assert placement.ok and gpus_of(placement) == ["gpu2", "gpu3"]
    assert not place(state, inventory, config, gpu_pod("more")).ok   # gpu0 and gpu1 stay out of reach


def test_permitted_nodes_hold_for_cpu_only_pods():
    # a and b both fit; best fit would pick either, the permission names b only
    state, inventory = cluster(make_topology("a", (16,)), make_topology("b", (4,)), make_topology("c", (4,)))
    config = tenant(nodes=["b"])
    placed = [place(state, inventory, config, pod(f"p{i}", tenant="t1", cpu_milli=2000)) for i in range(3)]
    assert [p.node for p in placed[:2]] == ["b", "b"]
    assert not placed[2].ok and not placed[2].refused and placed[2].filtered["not-permitted"] == 2


@pytest.mark.parametrize("config, asked, reason", [
    (tenant(nodes=["gone"]), pod("p", tenant="t1"), "permission: none of the nodes tenant t1 may use (gone)"),
    (tenant(nodes=["cpu"]), gpu_pod(), "permission: tenant t1 may use no GPU the pod asks for"),
    (tenant(groups=[("g", {"gpu": ["gpu0"]})]), pod("p", tenant="t1", gpu=GpuAsk(count=1, group="other")),
     "permission: no group of tenant t1 matches other"),
])
def test_permission_refusals(config, asked, reason):
    state, inventory = cluster(make_topology("cpu"), make_topology("gpu", gpus=2))
    placement = place(state, inventory, config, asked)
    assert (placement.ok, placement.refused) == (False, True)
    assert placement.reason.startswith(reason)


# ---- quota: per model, for all GPUs, and a pod naming no model ----------------

def a100_v100():
    return cluster(make_topology("a", gpus=2, model="A100"), make_topology("v", gpus=2, model="V100"))


def test_a_pod_naming_no_model_takes_a_model_with_room():
    # A100 used up (2000 of 2000), V100 unlimited and free: the pod goes to V100
    state, inventory = a100_v100()
    placement = place(state, inventory, tenant(quota={"A100": 2000}), gpu_pod(), held={"A100": 2000})
    assert placement.ok and placement.node == "v"


def test_a_pod_naming_a_full_model_is_refused():
    state, inventory = a100_v100()
    placement = place(state, inventory, tenant(quota={"A100": 2000}), gpu_pod(models=["A100"]), held={"A100": 1500})
    assert (placement.ok, placement.refused) == (False, True)
    assert placement.reason == "quota: tenant t1 has no room for 1000 milli-GPU of A100"


def test_every_model_full_refuses_a_pod_naming_none():
    state, inventory = a100_v100()
    placement = place(state, inventory, tenant(quota={"A100": 1000, "V100": 0}), gpu_pod(), held={"A100": 1000})
    assert placement.refused and placement.reason == "quota: tenant t1 has no room for 1000 milli-GPU of A100/V100"


@pytest.mark.parametrize("held, count, ok", [
    ({"gpu": 1000}, 1, True),    # can_take = 2000 − 1000 = 1000 ≥ 1 × 1000
    ({"gpu": 1000}, 2, False),   # 1000 < 2000 → "quota: tenant t1 gpu 1000 + 2000 > limit 2000"
    ({"A100": 2000}, 1, True),   # a model's usage alone does not count toward "gpu"…
])
def test_generic_gpu_quota_limits_all_models_together(held, count, ok):
    state, inventory = a100_v100()
    placement = place(state, inventory, tenant(quota={"gpu": 2000}), gpu_pod(count=count, models=["V100"]), held)
    assert placement.ok is ok
    if not ok:
        assert placement.refused and placement.reason == "quota: tenant t1 gpu 1000 + 2000 > limit 2000"


def test_usage_charges_gpus_to_their_model_and_to_gpu():
    # …because usage charges every GPU to its model and to "gpu" (unknown model: "gpu" once)
    holder = pod("h", tenant="t1", cpu_milli=2000, memory_mib=100)
    usage = tenant_usage([(holder, {"a/gpu0": 1000, "v/gpu0": 500, "x/gpu9": 250})],
                         {"a/gpu0": "A100", "v/gpu0": "V100"})
    assert usage == {"t1": {"cpu": 2000, "memory": 100, "A100": 1000, "V100": 500, "gpu": 1750}}


@pytest.mark.parametrize("limit, allocated, ask, ok", [
    (4000, 1000, 3, True),    # can_take = 4000 − 1000 = 3000 ≥ 3 × 1000
    (4000, 2000, 3, False),   # can_take = 2000 < 3000 → refused, reason "quota: …"
    (4000, 5000, 1, False),   # over the limit already: can_take clamps to 0
    (None, 9000, 3, True),    # no limit for the model: unlimited
])
def test_quota_inside_groups(limit, allocated, ask, ok):
    state, inventory = cluster(make_topology("n1", gpus=4, model="A100"))
    quota = {"A100": limit} if limit is not None else {}
    config = tenant(groups=[("g", {"n1": ["gpu0", "gpu1", "gpu2", "gpu3"]})], quota=quota)
    placement = place(state, inventory, config, gpu_pod(count=ask), held={"A100": allocated})
    assert placement.ok is ok
    if not ok:
        assert placement.refused and placement.reason.startswith("quota: ")


def test_can_take_formula():
    assert (can_take(8000, 3000), can_take(1000, 3000)) == (5000, 0)


def test_quota_on_one_model_leaves_another_model_usable_in_groups():
    state, inventory = cluster(make_topology("n1", gpus=2, model="A100"), make_topology("n2", gpus=2, model="T4"))
    config = tenant(auto=AutoGrouping(by_model=True), quota={"A100": 1000})
    placement = place(state, inventory, config, gpu_pod(), held={"A100": 1000})   # A100: can_take 0
    assert placement.ok and placement.node == "n2"


def test_cpu_quota_refuses():
    state, inventory = cluster(make_topology("n1"))
    placement = place(state, inventory, tenant(quota={"cpu": 2000}), pod("p", tenant="t1", cpu_milli=1500),
                      held={"cpu": 1000})
    assert placement.refused and placement.reason == "quota: tenant t1 cpu 1000 + 1500 > limit 2000"


# ---- a refusal holds no one back ----------------------------------------------------

def test_a_refused_pod_holds_back_no_one_and_leaves_the_wait():
    queue = SchedulingQueue(permit_timeout_s=30)
    queue.add(gpu_pod("refused", models=["A100"]), 1.0)
    queue.add(gpu_pod("next", models=["A100"]), 2.0)
    queue.wait("default/refused", "0/2 nodes fit: 2 gpu", {"gpu": 2}, now=100.0)   # it was waiting for room…
    queue.refuse("default/refused", "quota: tenant t1 has no room for 1000 milli-GPU of A100", {}, 0.0)  # …now quota
    assert [(e.pod.name, held) for e, held in queue.cycle()] == [("refused", None), ("next", None)]
    entry = queue.entries["default/refused"]
    assert (entry.refused, entry.waiting_since, entry.attempts) == (True, None, 2)
    queue.add(entry.pod, 1.0)   # a new event of the pod: tried again
    assert not entry.refused


# ---- group choice checks the whole pod ------------------------------------------------

def two_groups():
    # "tight" (n1, 2 GPUs) is the GPU best fit for a 2-GPU pod, but n1 has
    # 2 CPUs and 4 GiB; "roomy" (n2, 4 GPUs) has 16 CPUs and 64 GiB.
    state, inventory = cluster(make_topology("n1", (2,), gpus=2, memory_mib=4096, exclusive=False),
                               make_topology("n2", (8, 8), gpus=4))
    config = tenant(groups=[("tight", {"n1": ["gpu0", "gpu1"]}), ("roomy", {"n2": ["gpu0", "gpu1", "gpu2", "gpu3"]})])
    return state, inventory, config


@pytest.mark.parametrize("fields, node", [
    ({}, "n1"),                                            # fits both: best fit by GPUs
    ({"cpu_milli": 4000}, "n2"),                           # CPU: n1 has 2000m
    ({"memory_mib": 8192}, "n2"),                          # memory: n1 has 4096 MiB
    ({"cpu_milli": 2000, "exclusive_cpus": True}, "n2"),   # n1 offers no exclusive CPUs
])
def test_group_choice_picks_a_node_that_fits_the_whole_pod(fields, node):
    state, inventory, config = two_groups()
    placement = place(state, inventory, config, gpu_pod(count=2, **fields))
    assert placement.ok and placement.node == node


def test_no_group_node_fits_the_pod_is_a_lack_of_room():
    state, inventory, config = two_groups()
    placement = place(state, inventory, config, gpu_pod(count=2, cpu_milli=32000))
    assert (placement.ok, placement.refused) == (False, False)
    assert placement.reason == "no group has 2 free GPU(s) on a node that fits the pod's CPU and memory"


def test_choose_group_reads_the_fit_mask():
    state, inventory, config = two_groups()
    grouping = build_grouping(config, inventory)
    fits = node_fit(state, PodRequest.from_pod(gpu_pod(count=2, cpu_milli=4000)))
    assert fits[[state.rows["n1"], state.rows["n2"]]].tolist() == [False, True]
    assert choose_group(state, grouping, GroupAsk(2)).group == "tight"
    assert choose_group(state, grouping, GroupAsk(2), fits=fits).group == "roomy"
    state.assume("x", Allocation.of("n2", cpu_milli=14000))   # n2 full of CPU too
    fits = node_fit(state, PodRequest.from_pod(gpu_pod(count=2, cpu_milli=4000)))
    assert not choose_group(state, grouping, GroupAsk(2), fits=fits).ok
