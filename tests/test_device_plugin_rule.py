"""The device plugin's rule, table-driven: unit ids and what a container is
given (tidal_topology.gpu_units), which decision a kubelet call matches
(tidal_topology.gpu_ledger)."""

from __future__ import annotations

import pytest

from builders import pod
from tidal_schemas import BindResult, Gpu, GpuShare, PlacementDecision
from tidal_topology import gpu_ledger as rule
from tidal_topology import gpu_units

NODE = "n1"
UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-11111111-1111-2222-3333-444444444444"
MIG0 = "MIG-22222222-1111-2222-3333-444444444444"


def gpu(id: str, index: int = 0, memory_mib: int = 40960, **fields) -> Gpu:
    return Gpu(id=id, index=index, model="A100", memory_mib=memory_mib, **fields)


GPUS = {g.id: g for g in (gpu(UUID0), gpu(UUID1, 1), gpu(MIG0, 0, 10240, kind="virtual", parent=UUID0))}
ALL = frozenset(GPUS)


def placed(name: str, *shares: tuple[str, int], node: str = NODE, decision_id: str = "",
           uid: str = "") -> PlacementDecision:
    return PlacementDecision(decision_id=decision_id or f"d-{name}", namespace="ns", name=name, uid=uid,
                             outcome="placed", node=node, gpus=[GpuShare(gpu=g, milli=m) for g, m in shares])


def ledger(*decisions: tuple[PlacementDecision, float]) -> rule.Ledger:
    book = rule.Ledger()
    for d, at in decisions:
        book = rule.on_decision(book, d, NODE, at)
    return book


def test_a_gpu_is_1000_units_and_a_long_id_a_short_prefix():
    ids = gpu_units.unit_ids(UUID0)
    assert len(ids) == 1000 and ids[0] == f"{UUID0}-m0" and ids[-1] == f"{UUID0}-m999"
    assert max(len(u) for u in ids) <= gpu_units.MAX_DEVICE_ID  # 40 + len("-m999")
    long_id = "x" * 60
    prefix = gpu_units.unit_prefix(long_id)
    assert prefix.startswith("gpu-") and len(f"{prefix}-m999") <= gpu_units.MAX_DEVICE_ID
    assert gpu_units.split_unit(f"{prefix}-m17") == (prefix, 17)
    assert gpu_units.split_unit("nonsense") == ("nonsense", -1)


def test_a_mig_instance_is_unhealthy_with_its_parent():
    gpus = list(GPUS.values())
    assert gpu_units.healthy_gpus(gpus, {}) == ALL
    assert gpu_units.healthy_gpus(gpus, {UUID0: False}) == {UUID1}  # the MIG instance goes with its parent
    assert gpu_units.healthy_gpus(gpus, {MIG0: False}) == {UUID0, UUID1}


@pytest.mark.parametrize("shares, expected", [
    # whole GPUs: the UUIDs in the decision's order, no MPS limits
    ([(UUID1, 1000), (UUID0, 1000)], {"NVIDIA_VISIBLE_DEVICES": f"{UUID1},{UUID0}"}),
    # half a 40960 MiB GPU: 500 / 10 = 50 %, 40960 · 500 / 1000 = 20480 MiB
    ([(UUID0, 500)], {"NVIDIA_VISIBLE_DEVICES": UUID0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M"}),
    # a third: 333 // 10 = 33 %, 40960 · 333 // 1000 = 13639 MiB
    ([(UUID0, 333)], {"NVIDIA_VISIBLE_DEVICES": UUID0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "33",
                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=13639M"}),
    # 5 milli still gets 1 % (0 would mean no threads)
    ([(UUID0, 5)], {"NVIDIA_VISIBLE_DEVICES": UUID0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "1",
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=204M"}),
    # a MIG instance is a device of its own: its UUID, its memory (10240 · 250 / 1000 = 2560)
    ([(MIG0, 250)], {"NVIDIA_VISIBLE_DEVICES": MIG0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                     "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2560M"}),
])
def test_container_response(shares, expected):
    envs, cdi = gpu_units.container_response("d-a", shares, GPUS)
    assert envs == {**expected, "TIDAL_DECISION_ID": "d-a"}
    assert cdi == tuple(f"nvidia.com/gpu={g}" for g, _ in shares)


def test_a_share_of_a_gpu_of_unknown_memory_has_no_memory_pin():
    gpus = {"gpu0": gpu("gpu0", memory_mib=0)}
    envs, _ = gpu_units.container_response("d-a", [("gpu0", 500)], gpus)
    assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50" and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in envs


def test_oldest_by_decision_time_then_arrival():
    book = ledger((placed("late", (UUID1, 1000)), 2.0), (placed("early", (UUID0, 1000)), 1.0),
                  (placed("tie", (UUID0, 1000)), 1.0), (placed("half", (UUID0, 500)), 0.5))
    assert rule.oldest(book, 1000).pod == "ns/early"  # time 1.0 before 2.0; before "tie" by arrival
    assert rule.oldest(book, 500).pod == "ns/half" and rule.oldest(book, 2000) is None


@pytest.mark.parametrize("later, waits", [
    (placed("a", (UUID1, 1000), decision_id="d-a2"), "d-a2"),  # a newer decision replaces the older
    (placed("a", (UUID0, 1000)), "d-a"),  # the same decision again keeps its place
    (placed("a", (UUID0, 1000), node="n2", decision_id="d-a2"), None),  # placed elsewhere
    (PlacementDecision(decision_id="d-a2", namespace="ns", name="a", outcome="pending"), None),  # given up
    (placed("a", decision_id="d-a2"), None),  # placed here without GPUs
])
def test_a_pods_later_decision(later, waits):
    book = rule.on_decision(ledger((placed("a", (UUID0, 1000)), 1.0)), later, NODE, 2.0)
    assert (book.pending["ns/a"].decision_id if "ns/a" in book.pending else None) == waits


def test_a_bound_decision_outlives_another_decision_of_its_pod():
    book = rule.on_bind_result(ledger((placed("a", (UUID0, 1000), uid="u1"), 1.0)),
                               BindResult(decision_id="d-a", namespace="ns", name="a", node=NODE, ok=True), NODE)
    for later in (placed("a", (UUID1, 1000), decision_id="d-a2", uid="u1"),
                  placed("a", (UUID1, 1000), node="n2", decision_id="d-a3", uid="u1")):
        assert rule.on_decision(book, later, NODE, 2.0).pending["ns/a"].decision_id == "d-a"


@pytest.mark.parametrize("event, waits", [
    (pod("a", namespace="ns", phase="deleted", node=NODE), False),
    (pod("a", namespace="ns", phase="deleted", node=NODE, uid="other"), True),  # another incarnation's
    (pod("a", namespace="ns", phase="bound", node="n2"), False),
    (pod("a", namespace="ns", phase="running", node=NODE, decision_id="d-a"), False),  # admitted: spent
    (pod("a", namespace="ns", phase="bound", node=NODE, decision_id="d-a"), True),
    (BindResult(decision_id="d-a", namespace="ns", name="a", node=NODE, ok=False, reason="conflict"), False),
    (BindResult(decision_id="d-a", namespace="ns", name="a", node="n2", ok=True), False),
    (BindResult(decision_id="d-old", namespace="ns", name="a", node=NODE, ok=False), True),  # not its decision
])
def test_events_that_drop_a_waiting_decision(event, waits):
    book = ledger((placed("a", (UUID0, 1000), uid="u1"), 1.0))
    after = rule.on_pod(book, event, NODE) if hasattr(event, "phase") else rule.on_bind_result(book, event, NODE)
    assert ("ns/a" in after.pending) == waits
    if not waits:  # and a redelivery of the dropped decision is not taken up again
        assert "ns/a" not in rule.on_decision(after, placed("a", (UUID0, 1000), uid="u1"), NODE, 1.0).pending


def test_expiry_spares_bound_decisions():
    book = ledger((placed("a", (UUID0, 1000)), 1.0), (placed("b", (UUID1, 1000)), 1.0))
    book = rule.on_pod(book, pod("b", namespace="ns", phase="bound", node=NODE, decision_id="d-b"), NODE)
    assert set(rule.expire(book, 60.9, 60.0).pending) == {"ns/a", "ns/b"}  # 59.9 s old: not yet
    assert set(rule.expire(book, 61.0, 60.0).pending) == {"ns/b"}


def test_prefer_reserves_the_decided_gpus_free_units():
    book = ledger((placed("a", (UUID0, 500)), 1.0), (placed("c", (UUID0, 250)), 2.0))
    available = gpu_units.unit_ids(UUID1) + gpu_units.unit_ids(UUID0)
    first = rule.prefer(book, 500, available, (), GPUS, ALL, NODE)
    assert first.units == gpu_units.unit_ids(UUID0)[:500] and first.ledger.pending["ns/a"].reserved == first.units
    # another decision's preference keeps clear of a reservation not yet allocated
    other = rule.prefer(first.ledger, 250, available, (), GPUS, ALL, NODE)
    assert other.units == gpu_units.unit_ids(UUID0)[500:750]
    # asked again, the oldest decision's reservation is renewed, not doubled
    again = rule.prefer(other.ledger, 500, available, (), GPUS, ALL, NODE)
    assert again.units == first.units and again.ledger.pending["ns/a"].reserved == first.units


def test_prefer_includes_what_the_kubelet_must_include():
    book = ledger((placed("a", (UUID0, 3)), 1.0))
    must = (gpu_units.unit_ids(UUID0)[9],)
    found = rule.prefer(book, 3, gpu_units.unit_ids(UUID0), must, GPUS, ALL, NODE)
    assert found.units == must + gpu_units.unit_ids(UUID0)[:2]


def test_prefer_fills_the_count_when_the_kubelet_has_other_units_free():
    book = ledger((placed("a", (UUID0, 1000)), 1.0))
    available = gpu_units.unit_ids(UUID0)[:600] + gpu_units.unit_ids(UUID1)  # the kubelet counts 400 of gpu0 as taken
    found = rule.prefer(book, 1000, available, (), GPUS, ALL, NODE)
    assert found.units == gpu_units.unit_ids(UUID0)[:600] + gpu_units.unit_ids(UUID1)[:400]


def test_allocate_takes_the_reserved_decision_before_an_older_one():
    book = ledger((placed("b", (UUID1, 1000)), 2.0))
    reserved = rule.prefer(book, 1000, gpu_units.unit_ids(UUID0) + gpu_units.unit_ids(UUID1), (), GPUS, ALL, NODE)
    book = rule.on_decision(reserved.ledger, placed("a", (UUID0, 1000)), NODE, 1.0)  # older, arrived since
    given = rule.allocate(book, reserved.units, GPUS, ALL, NODE)
    assert given.handed.pod == "ns/b" and set(given.ledger.pending) == {"ns/a"}
    assert given.ledger.handed["ns/b"].gpus == (UUID1,)


@pytest.mark.parametrize("shares, healthy, refusal", [
    ([(UUID0, 1000)], ALL - {UUID0}, f"names GPU {UUID0}, which is not healthy on node {NODE}"),
    ([("gpu9", 1000)], ALL, f"names GPU gpu9, which node {NODE} does not have"),
])
def test_allocate_refuses_a_gpu_it_cannot_give_and_spends_the_decision(shares, healthy, refusal):
    book = ledger((placed("a", *shares), 1.0), (placed("b", (UUID1, 1000)), 2.0))
    refused = rule.allocate(book, gpu_units.unit_ids(UUID1), GPUS, healthy, NODE)
    assert refused.handed is None and refused.found and refusal in refused.refusal
    # the refused decision is spent: the next container of that size gets the next decision
    assert rule.allocate(refused.ledger, gpu_units.unit_ids(UUID1), GPUS, healthy, NODE).handed.pod == "ns/b"


def test_allocate_without_a_decision_says_what_waits():
    book = ledger((placed("a", (UUID0, 500)), 1.0))
    refused = rule.allocate(book, gpu_units.unit_ids(UUID0)[:1000], GPUS, ALL, NODE)
    assert not refused.found and refused.handed is None
    assert refused.refusal == f"no placement decision for node {NODE} of 1000 milli-GPU awaits a container " \
                              "(waiting: ns/a (500))"


def test_release_drops_what_was_handed():
    book = ledger((placed("a", (UUID0, 1000), uid="u1"), 1.0))
    given = rule.allocate(book, gpu_units.unit_ids(UUID0), GPUS, ALL, NODE)
    assert "ns/a" in given.ledger.handed
    assert "ns/a" in rule.release(given.ledger, "ns/a", "u2").handed  # another incarnation's deletion
    assert "ns/a" not in rule.release(given.ledger, "ns/a", "u1").handed
