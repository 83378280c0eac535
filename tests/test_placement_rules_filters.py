"""Placement's refusals, one table per rule: the cache's `assume` checks and
`decide`'s filters (node CPU and memory, the exclusive-CPU capability, §A
per-NUMA room per CPU policy, GPU model, kind and room, nodes taking no new
pods: taints, stale metrics; a tenant's permitted nodes).

Each rule is tried at its boundary — the largest ask that fits and one unit
more — on an empty node and on a partly used one: a check that compares
with the node's allocatable instead of what is left passes on an empty node
and fails on the used one."""

from __future__ import annotations

import numpy as np
import pytest

from tidal_placement.cache import STOP_SCHEDULING
from tidal_placement.cluster_state import Allocation
from tidal_placement.decide import PodRequest, decide, node_fit
from tidal_placement.staleness import stale_reason

from placement_builders import cluster, free, node, use

# ---- ClusterState.assume: every figure checked against what is left --------------------------------

# node n: NUMA 0 and 1 of 4 exclusive CPUs each, 8000 m, 4096 MiB, gpu0 + gpu1.
# "partly used": a first pod holds 3000 m, 1096 MiB, 3 CPUs of NUMA 0 and 600 milli of gpu0, leaving
# 5000 m, 3000 MiB, NUMA [4 − 3, 4] = [1, 4], GPUs [1000 − 600, 1000] = [400, 1000].
FIRST = dict(cpu=3000, mem=1096, numa={0: 3}, gpus={"gpu0": 600})


@pytest.mark.parametrize("used, ask, fits", [
    # exclusive CPUs per NUMA node: free = allocatable − held
    (False, dict(numa={0: 4}), True),     # 4 ≤ 4
    (False, dict(numa={0: 5}), False),    # 5 > 4
    (True, dict(numa={0: 1}), True),      # 1 ≤ 4 − 3
    (True, dict(numa={0: 2}), False),     # 2 > 4 − 3: with the first pod's 3, 5 CPUs of a 4-CPU NUMA node
    (True, dict(numa={1: 4}), True),      # NUMA 1 untouched: 4 ≤ 4
    (True, dict(numa={0: 1, 1: 4}), True),
    (True, dict(numa={0: 2, 1: 1}), False),  # one NUMA node short refuses the whole ask
    # node CPU: 8000 − 3000 = 5000 m left
    (False, dict(cpu=8000), True), (False, dict(cpu=8001), False),
    (True, dict(cpu=5000), True), (True, dict(cpu=5001), False),
    # memory: 4096 − 1096 = 3000 MiB left
    (False, dict(mem=4096), True), (False, dict(mem=4097), False),
    (True, dict(mem=3000), True), (True, dict(mem=3001), False),
    # a GPU device: 1000 − 600 = 400 milli left on gpu0
    (False, dict(gpus={"gpu0": 1000}), True), (False, dict(gpus={"gpu0": 1001}), False),
    (True, dict(gpus={"gpu0": 400}), True), (True, dict(gpus={"gpu0": 401}), False),
    (True, dict(gpus={"gpu1": 1000}), True),
])
def test_assume_checks_what_is_left(used, ask, fits):
    state = cluster(node("n", (4, 4), gpus=2, memory_mib=4096))
    if used:
        use(state, "n", **FIRST)
    before = free(state, "n")
    outcome = state.assume("default/p", Allocation.of("n", ask.get("cpu", 0), ask.get("mem", 0),
                                                                   ask.get("numa"), ask.get("gpus")))
    assert outcome.ok is fits, outcome.reason
    if not fits:
        assert free(state, "n") == before and state.held("default/p") is None  # refused: nothing changed
    else:
        after = free(state, "n")
        # what was free less the ask, figure by figure
        assert after["cpu"] == before["cpu"] - ask.get("cpu", 0)
        assert after["mem"] == before["mem"] - ask.get("mem", 0)
        assert after["numa"] == [before["numa"][j] - ask.get("numa", {}).get(j, 0) for j in (0, 1)]
        assert after["gpu"] == [before["gpu"][k] - ask.get("gpus", {}).get(f"gpu{k}", 0) for k in (0, 1)]


@pytest.mark.parametrize("used", [False, True])
def test_assume_refuses_exclusive_cpus_where_the_node_offers_none(used):
    # exclusive=False: no per-NUMA allocatable figures, so no exclusive CPU may be held, however few
    state = cluster(node("n", (4, 4), exclusive=False))
    if used:
        use(state, "n", cpu=2000)
    outcome = state.assume("default/p", Allocation.of("n", 1000, 0, {0: 1}))
    assert not outcome.ok and "offers no exclusive CPUs" in outcome.reason


def test_assume_after_a_recorded_pod_counts_it():
    # `record` holds what the cluster says unchecked; an assume after it sees the NUMA node as used:
    # NUMA 0 = 4 − 4 recorded = 0 free, so 1 more is refused; released, all 4 fit again
    state = cluster(node("n", (4, 4)))
    assert state.record("default/bound", Allocation.of("n", 4000, 0, {0: 4})).ok
    assert not state.assume("default/p", Allocation.of("n", 1000, 0, {0: 1})).ok
    state.release("default/bound")
    assert state.assume("default/p", Allocation.of("n", 4000, 0, {0: 4})).ok


# ---- decide's filters -----------------------------------------------------------------------------

def placed(state, request, **kw):
    """(node chosen or None, nodes counted out per reason)."""
    choice = decide(state, request, **kw)
    assert choice.ok == (choice.node is not None)
    if choice.ok:  # what the policy chose, the cache takes
        assert state.assume(request.key, choice.allocation).ok, "the cache refused a decision"
        state.release(request.key)
    return choice.node, dict(choice.filtered)


def req(cpu=1000, **kw) -> PodRequest:
    return PodRequest("default/p", cpu_milli=cpu, **kw)


CPU_MEMORY = [
    # node n: 8 CPUs (4 + 4) = 8000 m, 4096 MiB. used: 5000 m and 1000 MiB held → 3000 m, 3096 MiB left
    ("cpu fits, empty", None, req(8000), True, {}),
    ("cpu short, empty", None, req(8001), False, {"cpu": 1}),
    ("cpu fits, used", dict(cpu=5000, mem=1000), req(3000), True, {}),
    ("cpu short, used", dict(cpu=5000, mem=1000), req(3001), False, {"cpu": 1}),
    ("memory fits, empty", None, req(memory_mib=4096), True, {}),
    ("memory short, empty", None, req(memory_mib=4097), False, {"memory": 1}),
    ("memory fits, used", dict(cpu=5000, mem=1000), req(memory_mib=3096), True, {}),
    ("memory short, used", dict(cpu=5000, mem=1000), req(memory_mib=3097), False, {"memory": 1}),
]

# Exclusive CPUs (§A) on NUMA nodes of 4 + 4. used: 3 CPUs of NUMA 0 held → free [1, 4] (node CPU
# not held, so only the NUMA rule can refuse). Feasible when
#   auto:        Σ free ≥ k                  empty 8,     used 1 + 4 = 5
#   single-numa: max free ≥ k                empty 4,     used max(1, 4) = 4; with NUMA 1 at 3: 3
#   spread:      b = ⌊k/n⌋, e = k − b·n; min free ≥ b and the e-th largest free ≥ b + 1
#                empty k = 8: b = 4 ✓; k = 9: b = 4, e = 1, largest 4 < 5 ✗
#                used  k = 3: b = 1, e = 1: min 1 ≥ 1, largest 4 ≥ 2 ✓; k = 4: b = 2, min 1 < 2 ✗
EXCL = dict(exclusive_cpus=True)
NUMA = [
    ("auto fits, empty", None, req(8000, **EXCL), True, {}),
    ("auto short, empty", None, req(9000, **EXCL), False, {"cpu": 1}),  # 9 CPUs > 8000 m: cpu counts it out first
    ("auto fits, used", dict(numa={0: 3}), req(5000, **EXCL), True, {}),
    ("auto short, used", dict(numa={0: 3}), req(6000, **EXCL), False, {"numa": 1}),
    ("single fits, empty", None, req(4000, cpu_policy="single-numa", **EXCL), True, {}),
    ("single short, empty", None, req(5000, cpu_policy="single-numa", **EXCL), False, {"numa": 1}),
    ("single fits, used", dict(numa={0: 3}), req(4000, cpu_policy="single-numa", **EXCL), True, {}),
    ("single fits, both used", dict(numa={0: 3, 1: 1}), req(3000, cpu_policy="single-numa", **EXCL), True, {}),
    ("single short, both used", dict(numa={0: 3, 1: 1}), req(4000, cpu_policy="single-numa", **EXCL), False,
     {"numa": 1}),
    ("spread fits, empty", None, req(8000, cpu_policy="spread", **EXCL), True, {}),
    ("spread fits, used", dict(numa={0: 3}), req(3000, cpu_policy="spread", **EXCL), True, {}),
    ("spread short, used", dict(numa={0: 3}), req(4000, cpu_policy="spread", **EXCL), False, {"numa": 1}),
]

# GPUs on a node of gpu0 + gpu1 (A100). used: 600 milli of gpu0 held → [400, 1000]:
#   whole GPUs: fully free devices, 2 empty, 1 used;  a share: the largest device room, 1000 empty, 1000 used;
#   with gpu1 held whole too → [400, 0]: a share of 400 fits, 401 does not
GPU = [
    ("whole fits, empty", None, req(gpu_count=2), True, {}),
    ("whole short, empty", None, req(gpu_count=3), False, {"gpu": 1}),
    ("whole fits, used", dict(gpus={"gpu0": 600}), req(gpu_count=1), True, {}),
    ("whole short, used", dict(gpus={"gpu0": 600}), req(gpu_count=2), False, {"gpu": 1}),
    ("share fits, empty", None, req(gpu_count=1, gpu_milli=999), True, {}),
    ("share fits, used", dict(gpus={"gpu0": 600, "gpu1": 1000}), req(gpu_count=1, gpu_milli=400), True, {}),
    ("share short, used", dict(gpus={"gpu0": 600, "gpu1": 1000}), req(gpu_count=1, gpu_milli=401), False,
     {"gpu": 1}),
    # the model filter ahead of room: A100 asked fits, H100 asked is counted out under gpu-model
    ("model fits, used", dict(gpus={"gpu0": 600}), req(gpu_count=1, gpu_models=("A100",)), True, {}),
    ("model refused, empty", None, req(gpu_count=1, gpu_models=("H100",)), False, {"gpu-model": 1}),
    ("model refused, used", dict(gpus={"gpu0": 600}), req(gpu_count=1, gpu_models=("H100",)), False,
     {"gpu-model": 1}),
    # a GPU kind takes the per-device path: fit = eligible ∧ free ≥ need, whole GPUs on distinct roots
    ("kind fits, empty", None, req(gpu_count=2, gpu_kind="physical"), True, {}),
    ("kind short, used", dict(gpus={"gpu0": 600}), req(gpu_count=2, gpu_kind="physical"), False, {"gpu": 1}),
    ("kind share fits, used", dict(gpus={"gpu0": 600}), req(gpu_count=1, gpu_milli=400, gpu_kind="physical"),
     True, {}),
    ("kind virtual refused", None, req(gpu_count=1, gpu_kind="virtual"), False, {"gpu": 1}),  # no vGPU at all
]


@pytest.mark.parametrize("case, used, request_, fits, filtered", CPU_MEMORY + NUMA + GPU,
                         ids=[c[0] for c in CPU_MEMORY + NUMA + GPU])
def test_decide_filters_at_the_boundary(case, used, request_, fits, filtered):
    state = cluster(node("n", (4, 4), gpus=2, memory_mib=4096))
    if used:
        use(state, "n", **used)
    chosen, counted_out = placed(state, request_)
    assert (chosen == "n") is fits and counted_out == filtered
    if not request_.gpu_count:  # node_fit filters the same way, but for GPUs
        assert bool(node_fit(state, request_)[state.rows["n"]]) is fits


@pytest.mark.parametrize("used", [None, dict(cpu=6000, numa={1: 2})])
@pytest.mark.parametrize("exclusive_pod, fits, filtered", [
    (True, False, {"no-exclusive-cpus": 1}),   # no per-NUMA figures: no exclusive CPU, however few
    (False, True, {}),                          # a shared-pool pod is not asked about it
])
def test_the_exclusive_capability(used, exclusive_pod, fits, filtered):
    state = cluster(node("n", (4, 4), exclusive=False))
    if used:
        use(state, "n", cpu=used["cpu"])  # what is held does not change the capability
    chosen, counted_out = placed(state, req(1000, exclusive_cpus=exclusive_pod))
    assert (chosen == "n") is fits and counted_out == filtered


@pytest.mark.parametrize("used", [False, True])
@pytest.mark.parametrize("reason", [STOP_SCHEDULING, stale_reason(30)])
def test_a_blocked_node_takes_no_pod_until_its_reason_is_lifted(used, reason):
    # a taint or stale metrics: counted out under its reason, whatever is free; lifted: it fits again
    state = cluster(node("n", (4, 4)), node("m", (2,)))
    if used:
        use(state, "n", cpu=2000)
    state.set_blocked("n", reason)
    # a 3-CPU pod: m (2000 m) has no room, n is blocked
    assert placed(state, req(3000)) == (None, {reason: 1, "cpu": 1})
    state.set_blocked("n", reason, blocked=False)
    assert placed(state, req(3000)) == ("n", {"cpu": 1})


def test_a_node_blocked_for_two_reasons_is_counted_under_one_and_needs_both_lifted():
    state = cluster(node("n", (4,)))
    state.set_blocked("n", STOP_SCHEDULING)
    state.set_blocked("n", stale_reason(30))
    assert placed(state, req())[1] == {stale_reason(30): 1}  # the first of the sorted reasons counts it
    state.set_blocked("n", STOP_SCHEDULING, blocked=False)
    assert placed(state, req())[0] is None
    state.set_blocked("n", stale_reason(30), blocked=False)
    assert placed(state, req())[0] == "n"


@pytest.mark.parametrize("used", [False, True])
def test_a_tenants_permitted_nodes(used):
    # nodes: a mask over rows; a node outside it is counted out first, as not-permitted
    state = cluster(node("a", (4,)), node("b", (4,)))
    if used:
        use(state, "b", cpu=1000)
    only_b = np.zeros(state.size, dtype=bool)
    only_b[state.rows["b"]] = True
    assert placed(state, req(3000), nodes=only_b) == ("b", {"not-permitted": 1})
    # b with 3000 m left (used) takes 3000 but not 3001 of a 4000 m node: counted out by cpu
    ask = 3001 if used else 4001
    assert placed(state, req(ask), nodes=only_b) == (None, {"not-permitted": 1, "cpu": 1})


def test_reasons_are_counted_in_filter_order_over_several_nodes():
    # five nodes, each out for its first failing filter: not permitted, tainted, cpu, memory, numa;
    # the sixth fits. A pod of 2 exclusive CPUs, single-numa, 1000 MiB.
    state = cluster(node("p", (4, 4)), node("t", (4, 4)), node("c", (1,)), node("m", (4, 4), memory_mib=512),
                    node("u", (4, 4)), node("ok", (4, 4)))
    use(state, "u", numa={0: 3, 1: 3})  # [1, 1] free: no NUMA node with 2
    use(state, "ok", numa={0: 3})       # [1, 4]: NUMA 1 takes 2
    state.set_blocked("t", STOP_SCHEDULING)
    permitted = np.ones(state.size, dtype=bool)
    permitted[state.rows["p"]] = False
    chosen, counted_out = placed(state, req(2000, memory_mib=1000, cpu_policy="single-numa", **EXCL),
                                 nodes=permitted)
    assert chosen == "ok"
    assert counted_out == {"not-permitted": 1, STOP_SCHEDULING: 1, "cpu": 1, "memory": 1, "numa": 1}
    choice = decide(state, req(2000, memory_mib=1000, cpu_policy="single-numa", **EXCL), nodes=permitted)
    assert choice.allocation.numa_cpus == ((1, 2),) and choice.candidates == 1


@pytest.mark.parametrize("used, ask, fits", [
    # 3 NUMA nodes of 4; spread gives each b = ⌊k/3⌋ and the e = k − 3b with most free one more
    (None, 12, True),                 # b = 4, e = 0: 4, 4, 4
    ({1: 2, 2: 2}, 6, True),          # free [4, 2, 2]: b = 2, e = 0: min 2 ≥ 2
    ({1: 2, 2: 2}, 7, True),          # b = 2, e = 1: the largest, 4 ≥ 3
    ({1: 2, 2: 2}, 8, False),         # b = 2, e = 2: the 2nd largest, 2 < 3 — though Σ free = 8 (auto fits)
    ({0: 1, 1: 2, 2: 2}, 7, True),    # free [3, 2, 2]: b = 2, e = 1: the largest, 3 ≥ 3 (exactly)
])
def test_spread_needs_an_even_share_everywhere_and_one_more_on_the_remainders(used, ask, fits):
    state = cluster(node("n", (4, 4, 4)))
    if used:
        use(state, "n", numa=used)
    spread, auto = (req(ask * 1000, cpu_policy=policy, **EXCL) for policy in ("spread", "auto"))
    assert (placed(state, spread)[0] == "n") is fits
    assert placed(state, auto)[0] == "n"  # Σ free ≥ k in every row: only spread's rule refuses
