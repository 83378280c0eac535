"""The §C scheduling queue: order, per-type hold-back, permit timeout."""

from __future__ import annotations

from datetime import timedelta

import pytest

from builders import T0, pod
from tidal_placement.queue import SchedulingQueue
from tidal_schemas import GpuAsk, resource_type


def gpu_pod(name, model="A100", minutes=0):
    return pod(name, gpu=GpuAsk(count=1, models=[model]), created_at=T0 + timedelta(minutes=minutes))


def order(queue):
    return [(e.key.split("/")[1], held) for e, held in queue.cycle()]


@pytest.mark.parametrize("pods, expected", [
    # lower fair-share score first
    ([("a", 2.0, 0), ("b", 1.0, 0)], ["b", "a"]),
    # equal scores: older first
    ([("a", 1.0, 5), ("b", 1.0, 1)], ["b", "a"]),
    # equal scores and times: by name
    ([("b", 1.0, 0), ("a", 1.0, 0)], ["a", "b"]),
])
def test_sort_order(pods, expected):
    queue = SchedulingQueue()
    for name, score, minutes in pods:
        queue.add(pod(name, created_at=T0 + timedelta(minutes=minutes)), score)
    assert [name for name, _ in order(queue)] == expected


def test_a_waiting_pod_holds_back_worse_pods_of_its_type_only():
    queue = SchedulingQueue(permit_timeout_s=30)
    queue.add(gpu_pod("best"), 1.0)
    queue.add(gpu_pod("worse"), 2.0)
    queue.add(gpu_pod("other-model", model="T4"), 3.0)
    queue.add(pod("cpu-job"), 5.0)
    queue.wait("default/best", "0/3 nodes fit", {"gpu": 3}, now=100.0)
    assert order(queue) == [("best", None),
                            ("worse", "waiting behind a higher-priority A100 pod"),
                            ("other-model", None), ("cpu-job", None)]
    assert resource_type(gpu_pod("x")) == "A100" and resource_type(pod("y")) == "cpu"


def test_permit_timeout_returns_the_pod_to_the_sort_queue():
    queue = SchedulingQueue(permit_timeout_s=30)
    queue.add(gpu_pod("best"), 1.0)
    queue.add(gpu_pod("worse"), 2.0)
    queue.wait("default/best", "no room", {}, now=100.0)
    assert queue.expire_waits(now=129.0) == []
    assert queue.expire_waits(now=130.0) == ["default/best"]
    assert order(queue) == [("best", None), ("worse", None)]   # no longer holds "worse" back


def test_nothing_is_dropped_and_rescoring_reorders():
    queue = SchedulingQueue()
    for name in "abc":
        queue.add(pod(name), 1.0)
    queue.rescore({"default/c": 0.1})
    assert [n for n, _ in order(queue)] == ["c", "a", "b"]
    assert queue.position("default/a") == 1
    queue.add(pod("a", cpu_milli=2000), 1.0)  # a newer event replaces, it does not duplicate
    assert len(queue.entries) == 3 and queue.entries["default/a"].pod.requests.cpu_milli == 2000
    assert queue.remove("default/b") is not None and len(queue.entries) == 2
