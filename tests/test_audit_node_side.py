"""The invariants of what reached the node (`tidal_audit.at_the_node`):
each container's devices are its decision's, and no pod Tidal placed fails
kubelet admission — each caught when violated, quiet when kept."""

from __future__ import annotations

import pytest

from tidal_audit import AdmissionFailure, ContainerDevices, at_the_node
from tidal_schemas import BindResult, GpuShare, PlacementDecision, PlacementDecisions, make_envelope
from tidal_schemas.fence import fence_decision


def placed(name: str, decision: str, gpus=(), node: str = "n1", uid: str = "u-p", epoch: int = 0,
           leader: str = "") -> PlacementDecision:
    return PlacementDecision(decision_id=decision, namespace="t", name=name, uid=uid, outcome="placed", node=node,
                             gpus=[GpuShare(gpu=g, milli=m) for g, m in gpus], epoch=epoch, leader=leader)


def events(*payloads):
    wrapped = [PlacementDecisions(items=[p]) if isinstance(p, PlacementDecision) else p for p in payloads]
    return [make_envelope(p, cluster="c1", source="test") for p in wrapped]


def bound(name: str, decision: str, ok: bool = True, node: str = "n1") -> BindResult:
    return BindResult(decision_id=decision, namespace="t", name=name, node=node, ok=ok)


def handed(*gpus, pod: str = "t/p", uid: str = "u-p", node: str = "n1", container: str = "main"):
    return ContainerDevices(pod, uid, node, container, tuple(gpus))


TWO = [("gpu-a", 1000), ("gpu-b", 1000)]


@pytest.mark.parametrize("log, given, wrong", [
    # what the decision chose: kept
    ((placed("p", "d1", TWO), bound("p", "d1")), [handed(*TWO)], False),
    # the same GPUs in another order: the same devices
    ((placed("p", "d1", TWO), bound("p", "d1")), [handed(("gpu-b", 1000), ("gpu-a", 1000))], False),
    # split over two containers
    ((placed("p", "d1", TWO), bound("p", "d1")), [handed(TWO[0]), handed(TWO[1], container="side")], False),
    # another GPU than decided
    ((placed("p", "d1", TWO), bound("p", "d1")), [handed(("gpu-a", 1000), ("gpu-c", 1000))], True),
    # the right GPU, the wrong share
    ((placed("p", "d1", [("gpu-a", 500)]), bound("p", "d1")), [handed(("gpu-a", 1000))], True),
    # handed by the decision of a failed bind, not the one that bound it
    ((placed("p", "d1", [("gpu-a", 1000)]), bound("p", "d1", ok=False), placed("p", "d2", [("gpu-b", 1000)]),
      bound("p", "d2")), [handed(("gpu-a", 1000))], True),
    ((placed("p", "d1", [("gpu-a", 1000)]), bound("p", "d1", ok=False), placed("p", "d2", [("gpu-b", 1000)]),
      bound("p", "d2")), [handed(("gpu-b", 1000))], False),
    # devices handed to a pod no decision placed there
    ((placed("p", "d1", TWO, node="n2"), bound("p", "d1", node="n2")), [handed(*TWO)], True),
    # admitted without devices although its decision gives GPUs
    ((placed("p", "d1", TWO), bound("p", "d1")), [handed()], True),
    # admitted without devices: a pod without GPUs, placed by Tidal or not
    ((placed("p", "d1"), bound("p", "d1")), [handed()], False),
    ((), [handed()], False),
    # a deposed leader's decision does not count
    ((fence_decision(2, "b"), placed("p", "d1", TWO, epoch=1, leader="a"), bound("p", "d1")), [handed(*TWO)], True),
])
def test_devices_not_decided(log, given, wrong):
    found = at_the_node(events(*log), given, [], cluster="c1")
    assert [v.invariant for v in found] == (["devices-not-decided"] if wrong else [])


def test_a_wrong_allocation_names_both_and_the_decision():
    (v,) = at_the_node(events(placed("p", "d1", TWO), bound("p", "d1")), [handed(("gpu-c", 1000))], [])
    assert "handed GPUs {gpu-c: 1000}" in v.message and "gives {gpu-a: 1000, gpu-b: 1000}" in v.message
    assert "placed d1" in v.line()


@pytest.mark.parametrize("log, failed", [
    ((placed("p", "d1"), bound("p", "d1")), True),  # placed and bound by Tidal, then rejected
    ((placed("p", "d1"), bound("p", "d1", ok=False)), False),  # never bound by Tidal
    ((), False),  # bound by someone else
    ((placed("p", "d1", uid="u-older"), bound("p", "d1")), False),  # another pod of that name
])
def test_failed_admission(log, failed):
    rejected = AdmissionFailure("t/p", "u-p", "n1", "OutOfcpu", "Pod was rejected: Node didn't have enough "
                                "resource: cpu, requested: 3000, used: 6000, capacity: 8000")
    found = at_the_node(events(*log), [], [rejected], cluster="c1")
    assert [v.invariant for v in found] == (["failed-admission"] if failed else [])
    if failed:
        assert "OutOfcpu" in found[0].message and "placed d1" in found[0].line()


def test_other_clusters_are_not_audited():
    other = [make_envelope(PlacementDecisions(items=[placed("p", "d1", TWO)]), cluster="c2", source="test"),
             make_envelope(bound("p", "d1"), cluster="c2", source="test")]
    assert [v.invariant for v in at_the_node(other, [handed(*TWO)], [], cluster="c1")] == ["devices-not-decided"]
