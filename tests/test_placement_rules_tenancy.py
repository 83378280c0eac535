"""Tenant rules (§B) one table per rule: CPU, memory and GPU quota at their
limit (`can_take = limit − allocated`), per-model quota masking models out,
permitted nodes and GPUs; each with nothing held and with part of the quota
or the permitted node used. And staleness: which nodes are taken out for
stale metrics. Pure, on a cache of a few nodes."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from tidal_placement.decide import decide
from tidal_placement.pod_request import PodRequest
from tidal_placement.staleness import stale_nodes, stale_reason, too_old
from tidal_placement.tenancy import allowance, can_take, charge, tenant_usage
from tidal_placement.tenant_ledger import TenantLedger
from tidal_schemas import GpuAsk, TenantConfig
from tidal_schemas.pod import TenantPermissions

from builders import T0, pod
from placement_builders import cluster, node, use


def tenant(quota=None, nodes=(), gpus=()) -> TenantConfig:
    return TenantConfig(tenant="t1", quota=quota or {}, permissions=TenantPermissions(nodes=list(nodes), gpus=list(gpus)))


def ask(cpu=1000, memory=512, gpus=0, milli=1000, models=()):
    return pod("p", tenant="t1", cpu_milli=cpu, memory_mib=memory,
               gpu=GpuAsk(count=gpus, milli=milli, models=list(models)))


@pytest.mark.parametrize("limit, allocated, more", [(10, 0, 10), (10, 4, 6), (10, 10, 0), (10, 12, 0)])
def test_can_take_is_the_limit_less_what_is_allocated_never_below_zero(limit, allocated, more):
    assert can_take(limit, allocated) == more


QUOTA = [
    # quota, held by the tenant already, the pod, refused with (None: allowed)
    ({"cpu": 4000}, {}, ask(cpu=4000), None),                                   # 4000 ≤ 4000 − 0
    ({"cpu": 4000}, {}, ask(cpu=4001), "quota: tenant t1 cpu 0 + 4001 > limit 4000"),
    ({"cpu": 4000}, {"cpu": 3000}, ask(cpu=1000), None),                         # 1000 ≤ 4000 − 3000
    ({"cpu": 4000}, {"cpu": 3000}, ask(cpu=1001), "quota: tenant t1 cpu 3000 + 1001 > limit 4000"),
    ({"memory": 1024}, {}, ask(memory=1024), None),
    ({"memory": 1024}, {}, ask(memory=1025), "quota: tenant t1 memory 0 + 1025 > limit 1024"),
    ({"memory": 1024}, {"memory": 1000}, ask(memory=24), None),
    ({"memory": 1024}, {"memory": 1000}, ask(memory=25), "quota: tenant t1 memory 1000 + 25 > limit 1024"),
    # "gpu": milli-GPU of every model together
    ({"gpu": 2000}, {}, ask(gpus=2), None),                                     # 2 × 1000 ≤ 2000
    ({"gpu": 2000}, {}, ask(gpus=3), "quota: tenant t1 gpu 0 + 3000 > limit 2000"),
    ({"gpu": 2000}, {"gpu": 1500}, ask(gpus=1, milli=500), None),               # 500 ≤ 2000 − 1500
    ({"gpu": 2000}, {"gpu": 1500}, ask(gpus=1), "quota: tenant t1 gpu 1500 + 1000 > limit 2000"),
    # a model's quota: the only model in the cluster without room refuses the pod
    ({"A100": 1000}, {"A100": 500}, ask(gpus=1, milli=500), None),             # 500 ≤ 1000 − 500
    ({"A100": 1000}, {"A100": 500}, ask(gpus=1), "quota: tenant t1 has no room for 1000 milli-GPU of A100"),
    # a CPU-only pod is not asked about GPU quota, however full
    ({"gpu": 0, "A100": 0}, {}, ask(cpu=1000), None),
]


@pytest.mark.parametrize("quota, held, pod_, refusal", QUOTA)
def test_quota_at_its_limit(quota, held, pod_, refusal):
    state = cluster(node("n", (8, 8), gpus=4))
    allowed = allowance(state, pod_, tenant(quota), None, held)
    assert allowed.reason == (refusal or "") and allowed.refused is (refusal is not None)


@pytest.mark.parametrize("held, chosen", [
    ({}, "a100"),                     # both models have room: §E ties (no loads given), the lower row wins
    ({"A100": 1000}, "h100"),         # A100 at its limit: its devices are masked out, the pod goes to H100
])
def test_a_model_without_quota_room_is_masked_out_not_refused(held, chosen):
    state = cluster(node("a100", (4,), gpus=2, model="A100"), node("h100", (4,), gpus=2, model="H100"))
    use(state, "h100", cpu=1000)  # a partly used H100 node
    pod_ = ask(gpus=1)
    allowed = allowance(state, pod_, tenant({"A100": 1000, "H100": 4000}), None, held)
    assert not allowed.refused
    choice = decide(state, PodRequest.from_pod(pod_), allowed=allowed.gpus, nodes=allowed.nodes)
    assert choice.node == chosen


@pytest.mark.parametrize("used", [False, True])
def test_permitted_nodes_limit_every_pod(used):
    state = cluster(node("a", (4,)), node("b", (4,)))
    if used:
        use(state, "b", cpu=1000)  # b: 3000 m left
    allowed = allowance(state, ask(cpu=3000), tenant(nodes=["b"]), None, {})
    assert allowed.nodes.tolist()[:2] == [False, True]
    choice = decide(state, PodRequest.from_pod(ask(cpu=3000)), nodes=allowed.nodes)
    assert choice.node == "b" and choice.filtered == {"not-permitted": 1}
    # one CPU more than b has left is a lack of room on the permitted node, not a refusal
    too_big = ask(cpu=3001 if used else 4001)
    assert not allowance(state, too_big, tenant(nodes=["b"]), None, {}).refused
    assert decide(state, PodRequest.from_pod(too_big), nodes=allowed.nodes).filtered == {"not-permitted": 1, "cpu": 1}


def test_permitted_nodes_none_of_which_is_known_refuse():
    state = cluster(node("a", (4,)))
    allowed = allowance(state, ask(), tenant(nodes=["x"]), None, {})
    assert allowed.refused and allowed.reason.startswith("permission: none of the nodes tenant t1 may use (x)")


@pytest.mark.parametrize("used, chosen_gpu, fits", [
    (None, ("gpu1", 1000), True),                # only gpu1 is permitted: the pod gets gpu1, not the lower gpu0
    ({"gpu1": 600}, None, False),                # gpu1 partly held: no whole permitted GPU (gpu0 is free)
    ({"gpu0": 1000}, ("gpu1", 1000), True),      # gpu0 held: gpu1 still free
])
def test_permitted_gpus(used, chosen_gpu, fits):
    state = cluster(node("n", (4,), gpus=2))
    if used:
        use(state, "n", gpus=used)
    pod_ = ask(gpus=1)
    allowed = allowance(state, pod_, tenant(gpus=["gpu1"]), None, {})
    assert not allowed.refused  # a lack of room on a permitted GPU is no refusal
    choice = decide(state, PodRequest.from_pod(pod_), allowed=allowed.gpus, nodes=allowed.nodes)
    assert choice.ok is fits
    if fits:
        assert choice.allocation.gpus == (chosen_gpu,)
    else:
        assert choice.filtered == {"gpu": 1}


def test_a_pod_asking_only_for_gpus_the_tenant_may_not_use_is_refused():
    state = cluster(node("n", (4,), gpus=2, model="A100"), node("m", (4,), gpus=1, model="H100"))
    allowed = allowance(state, ask(gpus=1, models=["H100"]), tenant(gpus=["gpu0"], nodes=["n"]), None, {})
    assert allowed.refused and allowed.reason == "permission: tenant t1 may use no GPU the pod asks for"


def test_charge_counts_cpu_memory_and_each_gpu_under_its_model_and_gpu():
    # 2 × 500 milli of A100 and one of an unknown model: A100 1000, "" counted as gpu once, gpu 1500
    held: dict[str, int] = {}
    charge(held, ask(cpu=1500, memory=256), [("A100", 500), ("A100", 500), ("", 500)])
    assert held == {"cpu": 1500, "memory": 256, "A100": 1000, "gpu": 1500}
    charge(held, ask(cpu=500, memory=0), [])
    assert held == {"cpu": 2000, "memory": 256, "A100": 1000, "gpu": 1500}


def test_the_ledger_equals_the_usage_of_every_pod_held():
    # p1: 1000 m + gpu0 (A100, 1000); p2: 2000 m; p1 replaced by a CPU-only pod, then p2 gone
    p1, p2, p1_again = (pod(name, tenant="t1", cpu_milli=cpu) for name, cpu in (("p1", 1000), ("p2", 2000),
                                                                                 ("p1", 500)))
    ledger = TenantLedger()
    ledger.set("default/p1", p1, [("A100", 1000)])
    ledger.set("default/p2", p2)
    assert ledger.usage() == tenant_usage([(p1, {"gpu0": 1000}), (p2, {})], {"gpu0": "A100"}) == {
        "t1": {"cpu": 3000, "memory": 1024, "A100": 1000, "gpu": 1000}}
    ledger.set("default/p1", p1_again)  # its old share out, the new one in: no GPU charged any more
    assert ledger.usage() == {"t1": {"cpu": 2500, "memory": 1024}}
    ledger.set("default/p2", None)
    ledger.set("default/p1", None)
    assert ledger.usage() == {}  # a tenant nothing charges is gone
    usage = (ledger.set("default/p1", p1), ledger.usage())[1]
    usage["t1"]["cpu"] = 0  # a copy: a cycle charges its own decisions into it
    assert ledger.usage()["t1"]["cpu"] == 1000
    ledger.clear()
    assert ledger.usage() == {}


# ---- staleness ------------------------------------------------------------------------------------------
# stale(n) ⇔ now − last_sample(n) > after_s; none when every node heard from would be, or after_s ≤ 0

def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize("samples, now, after_s, stale", [
    ({"a": 0, "b": 25}, 30, 30, set()),        # a: 30 − 0 = 30, not > 30
    ({"a": 0, "b": 25}, 31, 30, {"a"}),        # a: 31 > 30; b: 6
    ({"a": 0, "b": 25}, 56, 30, set()),        # both > 30: the pipeline is silent, not the nodes
    ({"a": 0, "b": 25, "c": 50}, 56, 30, {"a", "b"}),
    ({"a": 0}, 100, 30, set()),                # one node alone is never stale
    ({"a": 0, "b": 25}, 31, 0, set()),         # after_s 0: staleness off
    ({}, 31, 30, set()),
])
def test_stale_nodes(samples, now, after_s, stale):
    assert stale_nodes({node: at(s) for node, s in samples.items()}, at(now), after_s) == stale


@pytest.mark.parametrize("age, after_s, old", [(30, 30, False), (30.5, 30, True), (100, 0, False), (100, -1, False)])
def test_too_old(age, after_s, old):
    assert too_old(at(0), at(age), after_s) is old


def test_a_stale_node_is_filtered_under_its_reason():
    state = cluster(node("a", (4,)), node("b", (4,)))
    use(state, "b", cpu=1000)
    for stale in stale_nodes({"a": at(0), "b": at(25)}, at(31), 30):
        state.set_blocked(stale, stale_reason(30))
    choice = decide(state, PodRequest("default/p", cpu_milli=1000))
    assert choice.node == "b" and choice.filtered == {"stale: no metrics for 30s": 1}
    assert stale_reason(2.5) == "stale: no metrics for 2.5s"
    assert np.array_equal(state.schedulable[:2], [False, True])
