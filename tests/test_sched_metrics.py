"""What the scheduling metrics compute, table-driven: the reason category of
a pending pod, the kube-scheduler queue and attempt result it is counted
under, the attempt stopwatch, GPU use per model from the cache's device
arrays, the pending-to-bound clock, and oversell's per-pool sums."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from builders import pod
from tidal_oversell.pool_metrics import MIB, pool_totals
from tidal_placement.metrics import AttemptStopwatch, SchedulingMetrics
from tidal_placement.pod_request import ERROR, PLACED, UNRESOLVABLE, UNSCHEDULABLE, WAIT
from tidal_placement.queue import SchedulingQueue
from tidal_placement.sched_metrics import (QUEUES, REASONS, GpuModelUse, PendingClock, gpu_use_by_model, kube_queue,
                                           kube_result, pending_reason)
from tidal_schemas import Resources

STALE = "stale: no metrics for 30s"


def _reason(reason="", filtered=None, refused=False, invalid=False, held_back=False) -> str:
    return pending_reason(reason=reason, filtered=filtered or {}, refused=refused, invalid=invalid,
                          held_back=held_back, stale_stage=STALE)


@pytest.mark.parametrize("kwargs, expected", [
    (dict(), "new"),                                                       # not tried yet
    (dict(invalid=True, refused=True, reason="invalid pod: x"), "invalid"),  # invalid first
    (dict(held_back=True, reason="waiting behind a higher-priority cpu pod"), "waiting"),
    (dict(refused=True, reason="quota: tenant t gpu 1000 + 1000 > limit 1000"), "quota"),
    (dict(refused=True, reason="permission: tenant t may use no GPU the pod asks for"), "permission"),
    (dict(reason="0/5 nodes fit: 5 cpu", filtered={"cpu": 5}), "cpu"),
    (dict(reason="…", filtered={"cpu": 1, "memory": 4}), "memory"),          # the stage counting out most
    (dict(reason="…", filtered={"gpu-model": 2, "gpu": 2}), "gpu-model"),    # a tie: the earlier stage
    (dict(reason="…", filtered={"no-exclusive-cpus": 3}), "numa"),
    (dict(reason="…", filtered={"numa": 3}), "numa"),
    (dict(reason="…", filtered={"not-permitted": 3}), "permission"),
    (dict(reason="…", filtered={"stop-scheduling taint": 3, "cpu": 1}), "taint"),
    (dict(reason="…", filtered={STALE: 3}), "stale"),
    (dict(reason="no group of tenant t has 2 free GPUs"), "gpu-group"),
])
def test_pending_reason(kwargs, expected):
    assert _reason(**kwargs) == expected
    assert expected in REASONS


def test_gpu_use_by_model():
    # row 0: 2 A100 (one free, one with 250 free); row 1: one H100 fully held, one unhealthy pad;
    # row 2: absent (a removed node) with a free A100 that must not count
    valid = np.array([[True, True], [True, False], [True, False]])
    free = np.array([[1000, 250], [0, 0], [1000, 0]])
    model = np.array([[0, 0], [1, -1], [0, -1]])
    present = np.array([True, True, False])
    use = gpu_use_by_model(valid, free, model, present, ["A100", "H100"])
    # A100: capacity 2·1000; allocated (0 + 750); fragmented: 250 on the partly used one
    assert use == {"A100": GpuModelUse(capacity=2000, allocated=750, fragmented=250),
                   "H100": GpuModelUse(capacity=1000, allocated=1000, fragmented=0)}


def test_pending_clock_counts_from_first_sighting_once():
    clock = PendingClock()
    clock.pending("ns/a", 10.0)
    clock.pending("ns/a", 12.0)  # a newer pending event of the same pod: still from 10
    assert clock.bound("ns/a", 15.5) == 5.5
    assert clock.bound("ns/a", 16.0) is None  # read twice: counted once
    clock.pending("ns/b", 1.0)
    clock.forget("ns/b")  # deleted before it bound
    assert clock.bound("ns/b", 2.0) is None
    assert clock.bound("ns/never-pending", 2.0) is None


def test_pool_totals_sum_granted_and_own_per_pool():
    own = Resources(cpu_milli=8000, memory_mib=1024)
    nodes = [("c1", "default", Resources(cpu_milli=12000, memory_mib=1024), own),
             ("c1", "default", Resources(cpu_milli=8000, memory_mib=512), own),
             ("c1", "gpu", own, own)]
    totals = pool_totals(nodes)
    # default pool: cpu (12 + 8) granted over (8 + 8) own cores; memory (1024 + 512) MiB over 2048 MiB
    assert totals[("c1", "default", "cpu", "core")] == (20.0, 16.0)
    assert totals[("c1", "default", "memory", "byte")] == (1536.0 * MIB, 2048.0 * MIB)
    assert totals[("c1", "gpu", "cpu", "core")] == (8.0, 8.0)


@pytest.mark.parametrize("code, result", [
    (PLACED, "scheduled"), (UNSCHEDULABLE, "unschedulable"), (UNRESOLVABLE, "unschedulable"),
    (WAIT, "unschedulable"),  # held back: kube-scheduler's PreFilter rejection
    (ERROR, "error"), ("a-code-added-later", "error"),  # never a new label value
])
def test_kube_result(code, result):
    assert kube_result(code) == result


@pytest.mark.parametrize("held_back, due_now, due_later, queue", [
    (True, True, True, "unschedulable"),      # held back behind a better pod, whatever its back-off
    (False, True, True, "active"),            # tried at the next cycle
    (False, False, True, "backoff"),          # tried once its back-off ends, no event needed
    (False, False, False, "unschedulable"),   # waits for room or a tenant change
])
def test_kube_queue(held_back, due_now, due_later, queue):
    assert kube_queue(held_back=held_back, due_now=due_now, due_later=due_later) == queue
    assert queue in QUEUES


def test_queue_states_map_to_kube_queues():
    """The inputs as the metrics read them from a real queue: due now, and due at the end of time."""
    queue = SchedulingQueue(backoff_s=1.0)
    queue.add(pod("new", cpu_milli=1000), 1.0)  # a worse fair-share score than the others
    queue.add(pod("waits", cpu_milli=1000), 0.0)
    queue.add(pod("refused", cpu_milli=1000), 0.0)

    def where(now: float) -> dict[str, str]:
        return {e.pod.name: kube_queue(held_back=held is not None, due_now=queue.due(e, now),
                                       due_later=queue.due(e, float("inf"))) for e, held in queue.cycle()}

    assert where(100.0) == {"new": "active", "waits": "active", "refused": "active"}  # none tried yet
    queue.wait("default/waits", "0/1 nodes fit", {"cpu": 1}, now=100.0)  # fits nowhere; back-off until 101
    queue.refuse("default/refused", "quota: …", {}, now=100.0)           # a rule; back-off until 101
    # both wait for an event; "new" (a worse cpu pod) is held back behind "waits"
    assert where(100.5) == {"new": "unschedulable", "waits": "unschedulable", "refused": "unschedulable"}
    queue.room_appeared()  # both may try again, each after its back-off
    assert where(100.5) == {"new": "unschedulable", "waits": "backoff", "refused": "backoff"}
    assert where(101.0) == {"new": "unschedulable", "waits": "active", "refused": "active"}
    queue.wait("default/waits", "0/1 nodes fit", {"cpu": 1}, now=101.0)  # tried again: no room appeared since
    assert where(200.0)["waits"] == "unschedulable"


class Reads:
    """A stopwatch's time source that advances by one each read."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def test_stopwatch_without_a_loop_times_every_lap_from_the_restart():
    watch = AttemptStopwatch(Reads())
    assert watch.lap() is None  # no start yet
    watch.restart()             # t = 2
    assert watch.lap() == 1.0   # t = 3
    assert watch.lap() == 1.0   # t = 4


async def test_stopwatch_drops_a_span_in_which_the_loop_ran():
    watch = AttemptStopwatch(Reads())
    watch.restart()                      # t = 1
    assert watch.lap() == 1.0            # t = 2: no await in between
    assert watch.lap() == 1.0            # t = 3
    await asyncio.sleep(0)               # a publish: the loop runs other work
    assert watch.lap() is None           # t = 4: that span held the wait, not an attempt
    assert watch.lap() == 1.0            # t = 5: timed again
    await asyncio.sleep(0)
    watch.restart()                      # t = 6: a new cycle starts after the wait
    assert watch.lap() == 1.0            # t = 7


def test_attempts_are_counted_by_result_and_code_and_each_timed():
    registry = CollectorRegistry()
    metrics = SchedulingMetrics(registry, lambda: {}, lambda: [], stopwatch=AttemptStopwatch(Reads()))
    attempts = metrics.attempts  # the service reads it as a cycle starts: t = 1
    for code in (PLACED, WAIT, UNRESOLVABLE, ERROR, PLACED):
        attempts.labels("c1", code).inc()  # t = 2 … 6: one second each

    def sample(name, **labels):
        return registry.get_sample_value(name, {"cluster": "c1", **labels}) or 0.0

    assert sample("scheduler_schedule_attempts_total", result="scheduled") == 2
    assert sample("scheduler_schedule_attempts_total", result="unschedulable") == 2  # wait and unresolvable
    assert sample("scheduler_schedule_attempts_total", result="error") == 1
    assert sample("tidal_scheduler_attempts_total", code="wait") == 1
    assert sample("tidal_scheduler_attempts_total", code="unresolvable") == 1
    assert sample("scheduler_scheduling_attempt_duration_seconds_count", result="unschedulable") == 2
    assert sample("scheduler_scheduling_attempt_duration_seconds_sum", result="scheduled") == 2.0
    assert sample("scheduler_scheduling_attempt_duration_seconds_bucket", result="error", le="1.024") == 1
    assert sample("scheduler_scheduling_attempt_duration_seconds_bucket", result="error", le="0.512") == 0
