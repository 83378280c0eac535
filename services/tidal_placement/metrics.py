"""Placement's scheduling metrics on the service's /metrics, named after
kube-scheduler's (`scheduler_pending_pods`, `scheduler_schedule_attempts_total`,
`scheduler_pod_scheduling_sli_duration_seconds`). What they compute is in
sched_metrics.py; this is the wiring.

Gauges are read from the caches at scrape time, and only for the clusters
this replica leads: followers hold the same cache but take no decisions, so
summing over replicas counts each cluster once."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from tidal_schemas import resource_type

from .cache import ClusterCache
from .sched_metrics import PendingClock, gpu_use_by_model, pending_reason
from .staleness import stale_reason

# pending → bound: from sub-second (a free node) to hours (waiting for room)
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, float("inf"))


class SchedulingMetrics:
    """Counters fed by the service, gauges collected from `clusters()`."""

    def __init__(self, registry: CollectorRegistry, clusters: Callable[[], Mapping[str, ClusterCache]],
                 active: Callable[[], Iterable[str]]) -> None:
        self._clusters, self._active = clusters, active
        self.attempts = Counter("tidal_scheduler_schedule_attempts_total",
                                "Scheduling attempts by result (placed, unschedulable, unresolvable, wait, error)",
                                ["cluster", "result"], registry=registry)
        self.decisions = Counter("tidal_scheduler_placements_total", "Pods placed, by the GPU strategy that chose",
                                 ["cluster", "strategy"], registry=registry)
        self.latency = Histogram("tidal_scheduler_pod_scheduling_duration_seconds",
                                 "From a pod first seen pending to its good bind (event times)", ["cluster"],
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.clock: dict[str, PendingClock] = {}
        registry.register(self)

    def pending_seen(self, cluster: str, key: str, at: float) -> None:
        self.clock.setdefault(cluster, PendingClock()).pending(key, at)

    def pod_gone(self, cluster: str, key: str) -> None:
        self.clock.setdefault(cluster, PendingClock()).forget(key)

    def bound(self, cluster: str, key: str, at: float, count: bool) -> None:
        """A good bind read at event time `at`; `count` False while catching
        up (history re-read on a restart must not be counted again)."""
        seconds = self.clock.setdefault(cluster, PendingClock()).bound(key, at)
        if seconds is not None and count:
            self.latency.labels(cluster).observe(seconds)

    def collect(self):
        pending = GaugeMetricFamily("tidal_scheduler_pending_pods", "Pods waiting for a placement, by reason "
                                    "category and resource type", labels=["cluster", "reason", "resource_type"])
        capacity = GaugeMetricFamily("tidal_gpu_capacity_milli", "Milli-GPUs of healthy devices, per model",
                                     labels=["cluster", "model"])
        allocated = GaugeMetricFamily("tidal_gpu_allocated_milli", "Milli-GPUs allocated, per model",
                                      labels=["cluster", "model"])
        fragmented = GaugeMetricFamily("tidal_gpu_fragmented_milli", "Free milli-GPUs on partly allocated devices "
                                       "(usable by shares only), per model", labels=["cluster", "model"])
        clusters = self._clusters()
        for name in sorted(set(self._active()) & set(clusters)):
            cache = clusters[name]
            for (reason, kind), count in sorted(pending_counts(cache).items()):
                pending.add_metric([name, reason, kind], count)
            s, n = cache.state, cache.state.size
            for model, use in sorted(gpu_use_by_model(s.gpu_valid[:n], s.gpu_free[:n], s.gpu_dev_model[:n],
                                                      s.present[:n], s.models).items()):
                capacity.add_metric([name, model], use.capacity)
                allocated.add_metric([name, model], use.allocated)
                fragmented.add_metric([name, model], use.fragmented)
        return [pending, capacity, allocated, fragmented]


def pending_counts(cache: ClusterCache) -> dict[tuple[str, str], int]:
    """(reason category, resource type) -> pods in the cluster's queue."""
    counts: dict[tuple[str, str], int] = {}
    stale = stale_reason(cache.stale_after_s)
    for entry, held_back in cache.queue.cycle():
        reason = pending_reason(reason=entry.reason, filtered=entry.filtered, refused=entry.refused,
                                invalid=bool(entry.pod.invalid_reason), held_back=held_back is not None,
                                stale_stage=stale)
        key = (reason, resource_type(entry.pod))
        counts[key] = counts.get(key, 0) + 1
    return counts
