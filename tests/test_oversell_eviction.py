"""Eviction order and guard rails (SPEC §D, seed 003)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tidal_oversell.eviction import EvictionCandidate, candidate_from, eviction_order, plan_evictions
from tidal_oversell.pods_by_node import HeldPod
from tidal_schemas import PodLifecycle, PodUsage, Resources

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
BASIS = 1000.0      # MiB the utilisation is measured against
THRESHOLD = 0.9     # evict until below 900 MiB used


def pod(name: str, used: float, priority: int = 0, requested: float = 100.0, age_s: float = 3600.0,
        evictable: bool = False, critical: bool = False) -> EvictionCandidate:
    return EvictionCandidate(name=name, priority=priority, created_at=NOW - timedelta(seconds=age_s),
                             requested_memory_mib=requested, used_memory_mib=used,
                             evictable=evictable, system_critical=critical)


def plan(pods, used: float, max_evictions: int = 10, **kwargs):
    return plan_evictions(pods, used, BASIS, THRESHOLD, max_evictions=max_evictions, **kwargs)


def chosen(result) -> list[str]:
    return [step.pod.name for step in result.steps]


def order(pods, **kwargs) -> list[tuple[str, int]]:
    ranked, _ = eviction_order(pods, **kwargs)
    return [(p.name, rule) for p, rule, _ in ranked]


# --- the order, rule by rule

ORDER_CASES = [
    ("rule 1 before all, most used first",
     [pod("low", 300, priority=0), pod("e-small", 100, priority=500, evictable=True),
      pod("e-big", 200, priority=500, evictable=True)],
     [("e-big", 1), ("e-small", 1), ("low", 3)]),
    ("rule 1 tie on usage: youngest first",
     [pod("e-old", 100, evictable=True, age_s=900), pod("e-young", 100, evictable=True, age_s=60)],
     [("e-young", 1), ("e-old", 1)]),
    ("rule 2 lowest priority first, top priority last",
     [pod("p10", 50, priority=10), pod("p5", 50, priority=5), pod("p100", 500, priority=100)],
     [("p5", 2), ("p10", 2), ("p100", 3)]),
    ("rule 2 tie on priority: youngest first",
     [pod("old", 50, priority=5, age_s=900), pod("young", 50, priority=5, age_s=60), pod("top", 50, priority=9)],
     [("young", 2), ("old", 2), ("top", 3)]),
    # ratios: x 512/256 = 2.0, y 256/512 = 0.5, z 300/300 = 1.0
    ("rule 3 lowest reserved/used first",
     [pod("x", 256, priority=100, requested=512), pod("y", 512, priority=100, requested=256),
      pod("z", 300, priority=100, requested=300)],
     [("y", 3), ("z", 3), ("x", 3)]),
    # a 100/200 = 0.5 and b 200/400 = 0.5: tie → youngest (b)
    ("rule 3 tie on ratio: youngest first",
     [pod("a", 200, priority=100, requested=100, age_s=900), pod("b", 400, priority=100, requested=200, age_s=60)],
     [("b", 3), ("a", 3)]),
    ("full tie: by name",
     [pod("m2", 100, priority=100), pod("m1", 100, priority=100)],
     [("m1", 3), ("m2", 3)]),
    ("evictable label outranks a high priority",
     [pod("plain-low", 100, priority=1), pod("labelled-top", 100, priority=1000, evictable=True)],
     [("labelled-top", 1), ("plain-low", 3)]),
]


@pytest.mark.parametrize("pods, expected", [c[1:] for c in ORDER_CASES], ids=[c[0] for c in ORDER_CASES])
def test_eviction_order(pods, expected):
    assert order(pods) == expected


def test_highest_priority_ignores_system_critical_pods():
    # the critical pod's 2e9 would otherwise push everyone into rule 2
    pods = [pod("kube-proxy", 100, priority=2_000_000_000, critical=True),
            pod("a", 100, priority=100), pod("b", 100, priority=10)]
    assert order(pods) == [("b", 2), ("a", 3)]


def test_configured_top_priority_overrides_the_one_found():
    pods = [pod("a", 100, priority=100), pod("b", 100, priority=10)]
    assert order(pods, top_priority=1000) == [("b", 2), ("a", 2)]


# --- the plan: stop once below the threshold

def test_stops_as_soon_as_projected_utilisation_is_below_threshold():
    # used 1000 → 1.0; e-big 200 → 0.8 < 0.9: done after one
    pods = [pod("e-small", 100, evictable=True), pod("e-big", 200, evictable=True), pod("low", 300)]
    result = plan(pods, used=1000)
    assert chosen(result) == ["e-big"]
    assert result.satisfied
    assert result.steps[0].projected_utilisation == pytest.approx(0.8)
    assert result.start_utilisation == 1.0 and result.final_utilisation == pytest.approx(0.8)


def test_walks_through_all_three_rules_with_projection_after_each():
    # used 1000 (1.0): p5 −50 → 0.95; p10 −50 → 0.90 (not < 0.9); p100 −500 → 0.40
    pods = [pod("p10", 50, priority=10), pod("p5", 50, priority=5), pod("p100", 500, priority=100, requested=400)]
    result = plan(pods, used=1000)
    assert [(s.pod.name, s.rule) for s in result.steps] == [("p5", 2), ("p10", 2), ("p100", 3)]
    assert [s.projected_utilisation for s in result.steps] == pytest.approx([0.95, 0.90, 0.40])
    assert result.satisfied


def test_every_step_says_which_rule_and_its_numbers():
    pods = [pod("e", 50, evictable=True), pod("p5", 50, priority=5),
            pod("top", 400, priority=100, requested=100)]
    result = plan(pods, used=1000)
    reasons = [s.reason for s in result.steps]
    assert reasons[0] == "rule 1: labelled evictable, uses 50 MiB; utilisation 1.000 -> 0.950"
    assert reasons[1] == "rule 2: priority 5 < highest 100; utilisation 0.950 -> 0.900"
    # 100/400 = 0.25
    assert reasons[2] == "rule 3: highest priority 100, reserved/used = 100/400 = 0.250; utilisation 0.900 -> 0.500"


def test_below_threshold_nothing_to_evict():
    result = plan([pod("e", 100, evictable=True)], used=899)
    assert result.steps == [] and result.satisfied
    assert "nothing to evict" in result.reason


def test_at_threshold_evicts():
    # 900/1000 = 0.9 is not below 0.9
    result = plan([pod("e", 100, evictable=True)], used=900)
    assert chosen(result) == ["e"]


def test_system_critical_pods_are_never_evicted():
    pods = [pod("critical", 900, priority=0, evictable=True, critical=True), pod("small", 10)]
    result = plan(pods, used=1000)
    assert chosen(result) == ["small"]
    assert not result.satisfied  # 0.99 still ≥ 0.9 and nothing else may go
    assert ("critical", "system-critical: never evicted") in result.skipped
    assert "no eligible pod left" in result.reason


def test_pods_using_no_memory_are_not_evicted():
    pods = [pod("idle", 0, evictable=True), pod("busy", 200)]
    result = plan(pods, used=1000)
    assert chosen(result) == ["busy"]
    assert ("idle", "uses no memory: evicting it frees nothing") in result.skipped


def test_max_evictions_per_round():
    # five 30 MiB evictable pods; need used < 900 from 1000 → 4 evictions (880), allowed 2
    pods = [pod(f"e{i}", 30, evictable=True, age_s=100 * i) for i in range(5)]
    result = plan(pods, used=1000, max_evictions=2)
    assert chosen(result) == ["e0", "e1"]  # equal usage: youngest first
    assert not result.satisfied
    assert result.final_utilisation == pytest.approx(0.94)  # 1000 − 60
    assert "max evictions per round (2) reached" in result.reason


def test_max_evictions_not_hit_when_the_last_allowed_one_suffices():
    pods = [pod("a", 60, evictable=True), pod("b", 60, evictable=True)]
    result = plan(pods, used=1000, max_evictions=2)  # 1000 − 120 = 880 < 900
    assert chosen(result) == ["a", "b"] and result.satisfied


def test_candidate_from_pod_lifecycle_and_usage():
    lifecycle = PodLifecycle(namespace="team", name="job-1", phase="running", node="n1", priority=7,
                             evictable=True, requests=Resources(cpu_milli=500, memory_mib=2048),
                             created_at=NOW)
    candidate = candidate_from(HeldPod.of(lifecycle), PodUsage(pod="team/job-1", memory_mib=3000))
    assert candidate == EvictionCandidate(name="team/job-1", priority=7, created_at=NOW,
                                          requested_memory_mib=2048, used_memory_mib=3000, evictable=True)
    assert candidate_from(HeldPod.of(lifecycle), None).used_memory_mib == 0
