"""Oversold allocatable per resource (SPEC §D): CPU follows the CPU peak and
memory the memory peak, and neither policy oversells without usage evidence."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from builders import pod
from tidal_oversell.allocatable import bounded_allocatable_event, factor_allocatable
from tidal_oversell.bounded import BoundedSettings
from tidal_oversell.factor import FactorSettings
from tidal_oversell.pods_by_node import HeldPod
from tidal_schemas import NodeMetrics, NodeTopology, PeakEstimate, Resources

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
LONG_AGO = NOW - timedelta(hours=2)
NODE = NodeTopology(node="n1", capacity=Resources(cpu_milli=16000, memory_mib=64000),
                    allocatable=Resources(cpu_milli=16000, memory_mib=64000, gpu_milli=0))
# four pods asking 4 CPUs and 8 GiB each: 16 CPUs, 32 GiB requested (as oversell keeps a pod)
PODS = [HeldPod.of(pod(f"p{i}", phase="running", node="n1", cpu_milli=4000, memory_mib=8000, started_at=LONG_AGO))
        for i in range(4)]
WIDE = FactorSettings(min_factor=1.0, max_factor=2.0, max_rise_per_update=10.0, warmup_s=600)


def peak(cpu_milli: int | None, memory_mib: int | None, samples: int = 30) -> PeakEstimate:
    return PeakEstimate(estimator="weighted", window_s=300, samples=samples, utilisation=0.5,
                        cpu_milli=cpu_milli, memory_mib=memory_mib)


@pytest.mark.parametrize("cpu_peak, memory_peak, cpu_factor, memory_factor", [
    # CPU flat out (16 of 16 requested CPUs used), memory idle (16 of 32 GiB):
    # CPU 16000/16000 = 1.0 → 16 CPUs; memory 32000/16000 = 2.0 → 128 GB
    (16000, 16000, 1.0, 2.0),
    # the other way round
    (8000, 32000, 2.0, 1.0),
    # both idle: both oversold, each by its own ratio (16000/10000 = 1.6, 32000/20000 = 1.6)
    (10000, 20000, 1.6, 1.6),
])
def test_factor_policy_scales_each_resource_by_its_own_peak(cpu_peak, memory_peak, cpu_factor, memory_factor):
    event = factor_allocatable(NODE, PODS, peak(cpu_peak, memory_peak), {}, NOW, WIDE)
    assert event.factors == pytest.approx({"cpu": cpu_factor, "memory": memory_factor})
    assert event.allocatable.cpu_milli == int(16000 * cpu_factor)
    assert event.allocatable.memory_mib == int(64000 * memory_factor)
    assert event.factor == pytest.approx(min(cpu_factor, memory_factor))


def test_a_busy_cpu_is_never_advertised_from_idle_memory():
    event = factor_allocatable(NODE, PODS, peak(16000, 8000), {}, NOW, WIDE)
    assert event.allocatable.cpu_milli == 16000  # 1.0 × the node's CPU, though memory allows 2.0
    assert event.allocatable.memory_mib > 64000


def test_factor_policy_smooths_each_resource_from_its_own_previous_factor():
    slow = FactorSettings(min_factor=1.0, max_factor=2.0, max_rise_per_update=0.1, warmup_s=600)
    event = factor_allocatable(NODE, PODS, peak(8000, 16000), {"cpu": 1.5, "memory": 1.0}, NOW, slow)
    assert event.factors == pytest.approx({"cpu": 1.6, "memory": 1.1})  # each rises by 0.1 from where it was


@pytest.mark.parametrize("estimate, pods, why", [
    (None, PODS, "no peak estimate"),
    (PeakEstimate(estimator="weighted", window_s=300, samples=1, reason="too few samples: 1 < 3"), PODS,
     "too few samples"),
    (peak(1000, 1000), PODS[:3] + [HeldPod.of(pod("new", phase="running", node="n1", cpu_milli=4000,
                                                  memory_mib=8000, started_at=NOW - timedelta(seconds=30)))],
     "warm-up"),
])
def test_without_usage_evidence_neither_policy_oversells(estimate, pods, why):
    # an idle node: the bounded formula alone would grant w · capacity = 1.5 × 16 CPUs
    idle = NodeMetrics(node="n1", sampled_at=NOW, interval_s=10, node_cpu_util=0.01, cpu_used_milli=100,
                       memory_used_mib=100, memory_total_mib=64000)
    bounded = bounded_allocatable_event(NODE, pods, idle, estimate, BoundedSettings(), warmup_s=600)
    assert bounded.allocatable == NODE.capacity and why in bounded.reason
    factor = factor_allocatable(NODE, pods, estimate, {}, NOW, WIDE)
    assert (factor.allocatable.cpu_milli, factor.allocatable.memory_mib) == (16000, 64000)
    assert factor.factors == {"cpu": 1.0, "memory": 1.0}


def test_bounded_policy_oversells_with_evidence():
    # 16 CPUs allocated, 4 used: 16 · 16/4 = 64 > w · 16 = 24 → 24 CPUs
    idle = NodeMetrics(node="n1", sampled_at=NOW, interval_s=10, node_cpu_util=0.25, cpu_used_milli=4000,
                       memory_used_mib=16000, memory_total_mib=64000)
    event = bounded_allocatable_event(NODE, PODS, idle, peak(4000, 16000), BoundedSettings(), warmup_s=600)
    assert event.allocatable.cpu_milli == 24000
    assert event.factors["cpu"] == pytest.approx(1.5)
