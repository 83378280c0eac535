"""Thawing frozen pods once their NUMA node is cool (SPEC §E hotspot step 3).
4000 milli-CPU per NUMA node; low 0.60, high 0.80. Rule: smallest usage
when frozen first, ties frozen longest first; a pod is thawed only while
its NUMA nodes are below low and if none of them goes above high."""

from __future__ import annotations

import pytest

from test_remediation_state import SETTINGS, action, ago, be, kinds, plan, remember
from tidal_remediation.memory import RemediationMemory
from tidal_remediation.policy_settings import PolicySettings


def frozen(*pods: tuple[str, float, float]) -> RemediationMemory:
    """Memory of confirmed freezes on NUMA 0: (pod, milli-CPU when frozen, seconds ago)."""
    return remember(*(action("freeze", pod, cpu=cpu, at=ago(age)) for pod, cpu, age in pods))


def thawed(result) -> list[str]:
    return [a.pod for a in result.actions if a.kind == "thaw"]


THAW_CASES = [
    # 0.50 + 200/4000 = 0.55 < 0.60 → + 400/4000 = 0.65: stop
    ("smallest first, while below low", [0.5], [("a", 800, 300), ("b", 200, 100), ("c", 400, 200)], ["b", "c"]),
    # 0.30 → 0.35 → 0.45 → 0.65 (≤ 0.80), then the budget of 3 is spent
    ("all three fit", [0.3], [("a", 800, 300), ("b", 200, 100), ("c", 400, 200)], ["b", "c", "a"]),
    # LIFO would thaw new (frozen 100 s ago) first; the smaller, older one goes first
    ("smaller before more recent", [0.5], [("old", 200, 900), ("new", 800, 100)], ["old", "new"]),
    ("tie on usage: frozen longest first", [0.55], [("x", 400, 100), ("y", 400, 500)], ["y"]),
    # big: 0.50 + 1600/4000 = 0.90 > 0.80: it would be hot again at once; small: 0.50 + 0.05 = 0.55
    ("a pod that would make it hot again waits", [0.5], [("big", 1600, 900), ("small", 200, 100)], ["small"]),
    ("between the thresholds: nothing", [0.65], [("a", 200, 900)], []),
    ("exactly low: not cold", [0.6], [("a", 200, 900)], []),
]


@pytest.mark.parametrize("loads, pods, expected", [c[1:] for c in THAW_CASES], ids=[c[0] for c in THAW_CASES])
def test_thaw_order_and_stop(loads, pods, expected):
    result = plan(loads, [be(p, 0, frozen=True) for p, _, _ in pods], frozen(*pods))
    assert thawed(result) == expected
    assert all(a.threshold == SETTINGS.low_threshold and a.numa == 0 for a in result.actions)


def test_thaw_projection_and_reason():
    result = plan([0.5], [], frozen(("b", 200, 100), ("c", 400, 200)))
    first, second = result.actions
    assert (first.load_before, first.projected_load) == pytest.approx((0.5, 0.55))
    assert (second.load_before, second.projected_load) == pytest.approx((0.55, 0.65))
    assert first.reason == ("NUMA 0 load 0.500 < low 0.600: thaw b, smallest usage first "
                            "(200 milli-CPU when frozen); projected 0.500 -> 0.550")
    assert first.pod_cpu_milli == 200


def test_why_a_pod_waits():
    result = plan([0.5], [], frozen(("big", 1600, 900)))
    assert result.actions == []
    assert "big: not thawed, its 1600 milli-CPU would take NUMA 0 to 0.900 > high 0.800" in result.notes


SPAN_CASES = [
    # 0.30 + 600/4000 = 0.45, 0.50 + 200/4000 = 0.55
    ("both NUMA nodes cold", [0.3, 0.5], {0: 600.0, 1: 200.0}, ["s"], {0: 0.45, 1: 0.55}),
    ("its other NUMA node is not below low", [0.3, 0.7], {0: 600.0, 1: 200.0}, [], {0: 0.3, 1: 0.7}),
    # 0.30 + 0.15 = 0.45 on NUMA 0, but 0.59 + 1000/4000 = 0.84 > 0.80 on NUMA 1
    ("it would make its other NUMA node hot", [0.3, 0.59], {0: 600.0, 1: 1000.0}, [], {0: 0.3, 1: 0.59}),
]


@pytest.mark.parametrize("loads, shares, expected, projected", [c[1:] for c in SPAN_CASES],
                         ids=[c[0] for c in SPAN_CASES])
def test_thaw_a_pod_on_two_numa_nodes(loads, shares, expected, projected):
    memory = remember(action("freeze", "s", cpu=sum(shares.values()), shares=shares, at=ago(600)))
    result = plan(loads, [be("s", 0, numa=(0, 1), frozen=True)], memory)
    assert thawed(result) == expected
    assert result.projected == pytest.approx(projected)


def test_pod_is_thawed_once_even_if_both_its_numa_nodes_are_cold():
    memory = remember(action("freeze", "s", cpu=800, shares={0: 400.0, 1: 400.0}, at=ago(600)))
    assert thawed(plan([0.2, 0.1], [], memory)) == ["s"]


UNRECORDED_CASES = [
    # known k first; then one pod whose freeze the memory never saw (usage unknown), then stop for NUMA 0
    ("after the known ones, one per NUMA node", True, ["k", "u1"]),
    ("switched off: left frozen", False, ["k"]),
]


@pytest.mark.parametrize("adopt, expected", [c[1:] for c in UNRECORDED_CASES], ids=[c[0] for c in UNRECORDED_CASES])
def test_frozen_pods_the_memory_does_not_know(adopt, expected):
    pods = [be("k", 0, frozen=True), be("u1", 0, frozen=True), be("u2", 0, frozen=True)]
    result = plan([0.2], pods, frozen(("k", 200, 600)), PolicySettings(thaw_unrecorded_frozen=adopt))
    assert thawed(result) == expected
    if adopt:
        assert result.actions[1].pod_cpu_milli is None
        assert "no more thaws here until re-measured" in result.notes[-1]


def test_latency_sensitive_pod_frozen_by_someone_else_is_not_thawed():
    pod = be("web", 0, frozen=True).model_copy(update={"qos": "LS"})
    assert plan([0.2], [pod]).actions == []


def test_cool_down_before_thawing():
    memory = frozen(("a", 200, 10))          # frozen 10 s ago: NUMA 0 still settling
    result = plan([0.2], [], memory)
    assert result.actions == [] and result.notes == ["NUMA 0: cool-down, last action 10s ago < 30s"]


def test_unanswered_thaw_is_not_sent_again_by_the_planner():
    memory = frozen(("a", 200, 600), ("b", 300, 600))
    memory.record_action(action("thaw", "a", at=ago(40)))
    assert thawed(plan([0.2], [], memory)) == ["b"]


def test_cold_numa_node_without_frozen_pods_says_nothing():
    result = plan([0.1, 0.2], [], RemediationMemory())
    assert result.actions == [] and result.notes == []


def test_hotspots_are_handled_before_thaws():
    # NUMA 1 is hot and takes the only action allowed; NUMA 0's thaw waits
    result = plan([0.2, 0.9], [be("h", 800, numa=(1,))], frozen(("a", 200, 600)),
                  PolicySettings(max_actions_per_round=1))
    assert kinds(result) == [("freeze", "h")]


def test_spanning_pod_waits_for_the_cool_down_of_its_other_numa_node():
    memory = remember(action("freeze", "s", cpu=800, shares={0: 400.0, 1: 400.0}, at=ago(600)),
                      action("thaw", "t", numa=1, at=ago(10)))        # NUMA 1 acted on 10 s ago
    result = plan([0.2, 0.3], [], memory)
    assert result.actions == []
    assert "s: not thawed, a NUMA node it is on is cooling down" in result.notes
