"""Placement's scheduling metrics on the service's /metrics. Where the
meaning is kube-scheduler's, its names and labels (plus `cluster`):

    scheduler_schedule_attempts_total{result}          scheduled | unschedulable | error
    scheduler_scheduling_attempt_duration_seconds{result}
    scheduler_pending_pods{queue}                      active | backoff | unschedulable | gated

Tidal's own under `tidal_`: attempts by the cycle's status code, pending
pods by reason category and resource type, placements per GPU strategy,
pending-to-bound latency by event times, GPU use per model, nodes taken out
as stale (their node agent went silent) and decisions awaiting their bind
result. What they compute is in sched_metrics.py; this is the wiring.

Gauges are read from the caches at scrape time, and only for the clusters
this replica leads: followers hold the same cache but take no decisions, so
summing over replicas counts each cluster once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from tidal_clock import Clock, elapsed, wall_clock
from tidal_schemas import BindResult, PodLifecycle, resource_type

from .cache import ClusterCache
from .sched_metrics import QUEUES, PendingClock, gpu_use_by_model, kube_queue, kube_result, pending_reason
from .staleness import stale_reason

# pending → bound: from sub-second (a free node) to hours (waiting for room)
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, float("inf"))
# kube-scheduler's for scheduler_scheduling_attempt_duration_seconds: 1 ms · 2^k, k < 15
ATTEMPT_BUCKETS = tuple(0.001 * 2 ** k for k in range(15))


class AttemptStopwatch:
    """The span of each attempt of a cycle: from the end of the attempt
    before it in the same run of the cycle (or from `restart`, the cycle's
    start) to its own end. The cycle tries pods one after another with no
    I/O in between, so a span holds one attempt's work (and passing over
    pods not due before it). A span in which the event loop ran anything
    else — the cycle suspended while its decisions were published — holds
    that wait, not an attempt's work: it is not timed (`lap` gives None),
    which leaves the first attempt after each publish untimed."""

    def __init__(self, read: Callable[[], float] = elapsed) -> None:
        self._read = read
        self._since: float | None = None
        self._armed = False  # a loop callback is queued that voids the span if it runs

    def restart(self) -> None:
        """A cycle starts: the next span starts now."""
        self._since = self._read()
        self._arm()

    def lap(self) -> float | None:
        """Seconds since the last lap or restart; None when the loop ran meanwhile."""
        now = self._read()
        since, self._since = self._since, now
        self._arm()
        return None if since is None else now - since

    def _arm(self) -> None:
        if self._armed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: nothing else can run between two laps
            return
        self._armed = True
        loop.call_soon(self._interrupted)  # runs only once this task yields to the loop

    def _interrupted(self) -> None:
        self._since, self._armed = None, False


class Attempts:
    """What the service counts each attempt on: `labels(cluster, code).inc()`
    (cycle.py tells the status code). Counts it under kube-scheduler's result
    and under Tidal's code, and times it (`AttemptStopwatch`). The labelled
    children are kept per (cluster, code): `labels()` of prometheus_client
    takes a lock and checks its values at each call, and a burst tries
    thousands of pods a second."""

    def __init__(self, by_result: Counter, by_code: Counter, seconds: Histogram,
                 stopwatch: AttemptStopwatch) -> None:
        self.by_result, self.by_code, self.seconds, self.stopwatch = by_result, by_code, seconds, stopwatch
        self._kept: dict[tuple[str, str], Attempts.One] = {}

    def labels(self, cluster: str, code: str) -> "Attempts.One":
        one = self._kept.get((cluster, code))
        if one is None:
            result = kube_result(code)
            one = self._kept[(cluster, code)] = Attempts.One(
                self.stopwatch, self.by_result.labels(cluster, result), self.by_code.labels(cluster, code),
                self.seconds.labels(cluster, result))
        return one

    class One:
        """One (cluster, code)'s children."""

        def __init__(self, stopwatch: AttemptStopwatch, by_result: Any, by_code: Any, seconds: Any) -> None:
            self.stopwatch, self.by_result, self.by_code, self.seconds = stopwatch, by_result, by_code, seconds

        def inc(self, amount: float = 1) -> None:
            self.by_result.inc(amount)
            self.by_code.inc(amount)
            seconds = self.stopwatch.lap()
            if seconds is not None:
                self.seconds.observe(seconds)


class SchedulingMetrics:
    """Counters fed by the service, gauges collected from `clusters()`.
    `clock` is the one the queue's back-off times are read on (the service's)."""

    def __init__(self, registry: CollectorRegistry, clusters: Callable[[], Mapping[str, ClusterCache]],
                 active: Callable[[], Iterable[str]], clock: Clock = wall_clock,
                 stopwatch: AttemptStopwatch | None = None) -> None:
        self._clusters, self._active, self.clock_of_queue = clusters, active, clock
        by_result = Counter("scheduler_schedule_attempts_total", "Number of attempts to schedule pods, by the "
                            "result (scheduled, unschedulable, error)", ["cluster", "result"], registry=registry)
        by_code = Counter("tidal_scheduler_attempts_total", "Scheduling attempts by the cycle's status code "
                          "(placed, unschedulable, unresolvable, wait, error)", ["cluster", "code"], registry=registry)
        seconds = Histogram("scheduler_scheduling_attempt_duration_seconds", "Scheduling attempt latency in "
                            "seconds (the scheduling algorithm; binding is the bridge's)", ["cluster", "result"],
                            buckets=ATTEMPT_BUCKETS, registry=registry)
        self.stopwatch = stopwatch or AttemptStopwatch()
        self._attempts = Attempts(by_result, by_code, seconds, self.stopwatch)
        self.decisions = Counter("tidal_scheduler_placements_total", "Pods placed, by the GPU strategy that chose",
                                 ["cluster", "strategy"], registry=registry)
        self.latency = Histogram("tidal_scheduler_pod_scheduling_duration_seconds",
                                 "From a pod first seen pending to its good bind (event times)", ["cluster"],
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.clock: dict[str, PendingClock] = {}
        registry.register(self)

    @property
    def attempts(self) -> Attempts:
        """The attempts counter; the service reads it as a cluster's cycle
        starts (service.schedule_cluster), which starts the cycle's stopwatch."""
        self.stopwatch.restart()
        return self._attempts

    def observe(self, envelope: Any, counting: bool) -> None:
        """Pending -> bound by event times, so a rebuild reads the same spans;
        `counting` False while catching up (history re-read on a restart must
        not be counted again)."""
        p, at = envelope.payload, envelope.time.timestamp()
        clock = self.clock.setdefault(envelope.cluster, PendingClock())
        if isinstance(p, PodLifecycle):
            if p.phase == "pending" and not p.foreign:
                clock.pending(p.event_key(), at)
            elif p.phase == "deleted":
                clock.forget(p.event_key())
        elif isinstance(p, BindResult) and p.ok:
            seconds = clock.bound(p.event_key(), at)
            if seconds is not None and counting:
                self.latency.labels(envelope.cluster).observe(seconds)

    def collect(self):
        by_queue = GaugeMetricFamily("scheduler_pending_pods", "Number of pending pods, by the queue type "
                                     "(active, backoff, unschedulable, gated)", labels=["cluster", "queue"])
        pending = GaugeMetricFamily("tidal_scheduler_pending_pods", "Pods waiting for a placement, by reason "
                                    "category and resource type", labels=["cluster", "reason", "resource_type"])
        stale = GaugeMetricFamily("tidal_scheduler_stale_nodes", "Nodes taken out of placement because their "
                                  "node agent sent no metrics for too long", labels=["cluster"])
        awaiting = GaugeMetricFamily("tidal_scheduler_binds_awaiting", "Pods placed whose bind result has not "
                                     "been read yet", labels=["cluster"])
        capacity = GaugeMetricFamily("tidal_gpu_capacity_milli", "Milli-GPUs of healthy devices, per model",
                                     labels=["cluster", "model"])
        allocated = GaugeMetricFamily("tidal_gpu_allocated_milli", "Milli-GPUs allocated, per model",
                                      labels=["cluster", "model"])
        fragmented = GaugeMetricFamily("tidal_gpu_fragmented_milli", "Free milli-GPUs on partly allocated devices "
                                       "(usable by shares only), per model", labels=["cluster", "model"])
        clusters, now = self._clusters(), self.clock_of_queue()
        for name in sorted(set(self._active()) & set(clusters)):
            cache = clusters[name]
            reasons, queues = pending_counts(cache, now)
            for (reason, kind), count in sorted(reasons.items()):
                pending.add_metric([name, reason, kind], count)
            for queue in QUEUES:
                by_queue.add_metric([name, queue], queues.get(queue, 0))
            stale.add_metric([name], len(cache.stale))
            awaiting.add_metric([name], len(cache.awaiting_bind))
            s, n = cache.state, cache.state.size
            for model, use in sorted(gpu_use_by_model(s.gpu_valid[:n], s.gpu_free[:n], s.gpu_dev_model[:n],
                                                      s.present[:n], s.models).items()):
                capacity.add_metric([name, model], use.capacity)
                allocated.add_metric([name, model], use.allocated)
                fragmented.add_metric([name, model], use.fragmented)
        return [by_queue, pending, stale, awaiting, capacity, allocated, fragmented]


def pending_counts(cache: ClusterCache, now: float) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """The pods of the cluster's queue at `now`: by (reason category,
    resource type), and by kube-scheduler queue (sched_metrics.kube_queue)."""
    reasons: dict[tuple[str, str], int] = {}
    queues: dict[str, int] = {}
    stale = stale_reason(cache.stale_after_s)
    queue = cache.queue
    for entry, held_back in queue.cycle():
        reason = pending_reason(reason=entry.reason, filtered=entry.filtered, refused=entry.refused,
                                invalid=bool(entry.pod.invalid_reason), held_back=held_back is not None,
                                stale_stage=stale)
        key = (reason, resource_type(entry.pod))
        reasons[key] = reasons.get(key, 0) + 1
        # due at the end of time: tried once its back-off ends, with no event needed
        where = kube_queue(held_back=held_back is not None, due_now=queue.due(entry, now),
                           due_later=queue.due(entry, float("inf")))
        queues[where] = queues.get(where, 0) + 1
    return reasons, queues
