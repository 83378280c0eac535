"""Peak estimators and the sample window (SPEC §D)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from builders import T0

from tidal_schemas import NodeMetrics, PeakEstimate, PodUsage, Resources
from tidal_scoring.peak import (
    ESTIMATORS,
    Sample,
    SampleWindow,
    Weights,
    load_profile_weights,
    nearest_rank,
    percentile,
    sample_from_metrics,
    statistical,
    weighted,
)

CAPACITY = Resources(cpu_milli=16000, memory_mib=65536)  # 16 CPUs, 64 GiB


def samples(*pairs: tuple[float, float], pods: bool = False) -> list[Sample]:
    """Samples 10 s apart; each pair is (cpu, memory) utilisation of the
    node, or of the summed pods when `pods`."""
    made = []
    for i, (cpu, memory) in enumerate(pairs):
        at = T0 + timedelta(seconds=10 * i)
        made.append(Sample(at, 0.0, 0.0, cpu, memory) if pods else Sample(at, cpu, memory))
    return made


# --- weighted

@pytest.mark.parametrize("weights, expected", [
    # combined per sample: 0.5·cpu + 0.5·mem = 0.30, 0.40, 0.30 → max 0.40
    (Weights(0.5, 0.5), 0.40),
    # 0.75·cpu + 0.25·mem = 0.25, 0.50, 0.30 → max 0.50
    (Weights(0.75, 0.25), 0.50),
    # memory only: 0.4, 0.2, 0.3 → 0.40
    (Weights(0.0, 1.0), 0.40),
])
def test_weighted_is_max_of_weighted_sum(weights, expected):
    window = samples((0.2, 0.4), (0.6, 0.2), (0.3, 0.3))
    peak = weighted(window, 300, CAPACITY, weights)
    assert isinstance(peak, PeakEstimate)
    assert (peak.estimator, peak.window_s, peak.samples) == ("weighted", 300, 3)
    assert peak.utilisation == pytest.approx(expected)
    # per resource: max cpu 0.6 · 16000 = 9600; max mem 0.4 · 65536 = 26214.4 → 26214
    assert (peak.cpu_milli, peak.memory_mib) == (9600, 26214)


# --- percentile

@pytest.mark.parametrize("count, expected", [
    (20, 0.19),  # rank ⌈0.95·20⌉ = 19 → 0.19
    (10, 0.10),  # rank ⌈9.5⌉ = 10 → the largest
    (21, 0.20),  # rank ⌈19.95⌉ = 20 → 0.20, not 0.21
    (3, 0.03),   # rank ⌈2.85⌉ = 3
])
def test_percentile_is_nearest_rank_95th_of_pod_sums(count, expected):
    # pod sums i/100 for i = 1..count, shuffled: order must not matter
    values = [i / 100 for i in range(1, count + 1)]
    values = values[1::2] + values[0::2]
    peak = percentile(samples(*[(v, v) for v in values], pods=True), 300, CAPACITY)
    assert peak.estimator == "percentile"
    assert peak.utilisation == pytest.approx(expected)


def test_percentile_uses_pod_sums_not_node_utilisation():
    # node utilisation 0.9 everywhere, pods sum to 0.2 cpu / 0.4 mem:
    # 0.5·0.2 + 0.5·0.4 = 0.3; cpu 0.2·16000 = 3200; mem 0.4·65536 = 26214
    window = [Sample(T0 + timedelta(seconds=i), 0.9, 0.9, 0.2, 0.4) for i in range(5)]
    peak = percentile(window, 300, CAPACITY)
    assert peak.utilisation == pytest.approx(0.3)
    assert (peak.cpu_milli, peak.memory_mib) == (3200, 26214)


@pytest.mark.parametrize("values, pct, expected", [
    ([5, 1, 3], 50, 3),         # rank ⌈1.5⌉ = 2
    ([5, 1, 3], 100, 5),
    ([5, 1, 3], 0, 1),          # rank at least 1
    ([1, 2, 3, 4], 75, 3),      # rank ⌈3⌉ = 3 exactly, not 4
])
def test_nearest_rank(values, pct, expected):
    assert nearest_rank(values, pct) == expected


# --- statistical

@pytest.mark.parametrize("values, expected", [
    ([0.3, 0.4, 0.5], 0.7),        # μ 0.4, σ = √((0.01+0+0.01)/2) = 0.1 → 0.4 + 0.3
    ([0.5, 0.5, 0.5, 0.5], 0.5),   # σ = 0 → μ
    ([0.5, 0.7, 0.9], 1.0),        # 0.7 + 3·0.2 = 1.3 → capped at 1
])
def test_statistical_is_mean_plus_three_sigma(values, expected):
    peak = statistical(samples(*[(v, v) for v in values]), 300, CAPACITY)
    assert peak.estimator == "statistical"
    assert peak.utilisation == pytest.approx(expected)


def test_statistical_per_resource_figures():
    # cpu 0.3/0.4/0.5 → 0.7 · 16000 = 11200; mem 0.1 constant → 6553.6 → 6554
    peak = statistical(samples((0.3, 0.1), (0.4, 0.1), (0.5, 0.1)), 300, CAPACITY)
    assert (peak.cpu_milli, peak.memory_mib) == (11200, 6554)


# --- too few samples: no number, a reason

@pytest.mark.parametrize("estimator", ["weighted", "percentile", "statistical"])
def test_too_few_samples_gives_no_utilisation(estimator):
    peak = ESTIMATORS[estimator](samples((0.5, 0.5), (0.6, 0.6)), 300, CAPACITY, min_samples=3)
    assert peak.estimator == estimator
    assert peak.samples == 2
    assert peak.utilisation is None and peak.cpu_milli is None and peak.memory_mib is None
    assert peak.reason == "too few samples: 2 < 3"


def test_statistical_needs_two_samples_even_if_allowed_one():
    peak = statistical(samples((0.5, 0.5)), 300, CAPACITY, min_samples=1)
    assert peak.utilisation is None and peak.reason == "too few samples: 1 < 2"
    assert weighted(samples((0.5, 0.5)), 300, CAPACITY, min_samples=1).utilisation == 0.5


def test_unknown_capacity_gives_no_absolute_figure():
    peak = weighted(samples((0.5, 0.5), (0.5, 0.5), (0.5, 0.5)), 300, Resources(cpu_milli=4000))
    assert (peak.cpu_milli, peak.memory_mib) == (2000, None)


# --- weights from the load profile

@pytest.mark.parametrize("shares, expected", [
    # mean cpu share (0.5 + 0.7)/2 = 0.6, mem share 0.2 → 0.6/0.8, 0.2/0.8
    ([(0.5, 0.2), (0.7, 0.2)], (0.75, 0.25)),
    ([(0.0, 0.0)], (0.5, 0.5)),                                      # nothing used
    ([], (0.5, 0.5)),                                                # no sample
    ([(0.0, 0.5)], (0.0, 1.0)),                                      # memory only
    ([(0.5, 0.5)], (0.5, 0.5)),                                      # both 50 %
])
def test_load_profile_weights(shares, expected):
    samples = [Sample(at=T0 + timedelta(seconds=i), cpu_util=0.0, memory_util=0.0, pods_cpu_util=cpu,
                      pods_memory_util=memory) for i, (cpu, memory) in enumerate(shares)]
    weights = load_profile_weights(samples)
    assert (weights.cpu, weights.memory) == pytest.approx(expected, abs=1e-4)
    assert weights.cpu + weights.memory == pytest.approx(1.0)


# --- from metrics

def test_sample_from_metrics():
    metrics = NodeMetrics(node="n1", sampled_at=T0, interval_s=10, node_cpu_util=0.42,
                          memory_used_mib=16384, memory_total_mib=65536,
                          pods=[PodUsage(pod="a/x", cpu_milli=4000, memory_mib=8192),
                                PodUsage(pod="a/y", cpu_milli=2000, memory_mib=8192)])
    sample = sample_from_metrics(metrics, CAPACITY)
    # mem 16384/65536 = 0.25; pods cpu 6000/16000 = 0.375; pods mem 16384/65536 = 0.25
    assert sample == Sample(T0, 0.42, 0.25, 0.375, 0.25)


def test_sample_from_metrics_without_total_memory_uses_capacity():
    metrics = NodeMetrics(node="n1", sampled_at=T0, interval_s=10, memory_used_mib=32768)
    assert sample_from_metrics(metrics, CAPACITY).memory_util == 0.5  # 32768 / 65536


# --- the window

def at(seconds: float) -> Sample:
    return Sample(T0 + timedelta(seconds=seconds), seconds / 100, 0.0)


def times(window: SampleWindow, node: str = "n1") -> list[float]:
    return [(s.at - T0).total_seconds() for s in window.samples(node)]


def test_window_keeps_samples_younger_than_window():
    window = SampleWindow(window_s=30)
    for t in (0, 10, 20, 30):
        window.add("n1", at(t))
    assert times(window) == [10, 20, 30]  # 30 − 0 = 30 is not < 30: dropped


def test_window_orders_late_samples_and_drops_stale_ones():
    window = SampleWindow(window_s=30)
    for t in (10, 30, 20):
        window.add("n1", at(t))
    window.add("n1", at(0))  # older than 30 − 30: dropped on arrival
    assert times(window) == [10, 20, 30]


def test_window_redelivered_sample_counts_once():
    window = SampleWindow(window_s=60)
    window.add("n1", at(10))
    window.add("n1", Sample(T0 + timedelta(seconds=10), 0.9, 0.9))
    [only] = window.samples("n1")
    assert only.cpu_util == 0.9


def test_window_is_per_node_and_forgets():
    window = SampleWindow(window_s=60)
    window.add("n2", at(0))
    window.add("n1", at(100))
    assert window.nodes() == ["n1", "n2"]
    assert times(window, "n2") == [0]  # n1's newer sample does not age n2's
    window.forget("n2")
    assert window.nodes() == ["n1"] and window.samples("n2") == []


def test_window_feeds_an_estimator():
    window = SampleWindow(window_s=30)
    for t in (0, 10, 20, 30, 40):
        window.add("n1", at(t))
    # kept 20, 30, 40 → cpu 0.2, 0.3, 0.4; weights cpu only → max 0.4
    peak = weighted(window.samples("n1"), window.window_s, CAPACITY, Weights(1.0, 0.0))
    assert peak.samples == 3 and peak.utilisation == pytest.approx(0.4)


def test_window_must_be_positive():
    with pytest.raises(ValueError):
        SampleWindow(window_s=0)
