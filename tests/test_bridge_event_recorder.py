"""The bridge's Events written behind the binds (tidal_bridge.event_recorder):
queued without waiting, a repeat counted on the queued one, a full queue
drops, each pod's budget, flushed at stop."""

from __future__ import annotations

import asyncio

import pytest

from tidal_bridge.event_budget import EventBudget
from tidal_bridge.event_recorder import EventRecorder


class FakeKube:
    def __init__(self, delay: float = 0.0) -> None:
        self.created: list[dict] = []
        self.delay, self.in_flight, self.most = delay, 0, 0

    async def create_event(self, namespace: str, body: dict) -> dict:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        self.created.append(body)
        return body


def make_pod(name: str, uid: str | None = None) -> dict:
    return {"metadata": {"namespace": "default", "name": name, "uid": uid or f"uid-{name}", "resourceVersion": "1"}}


async def test_record_never_waits_and_flush_writes_in_order():
    kube = FakeKube(delay=0.05)
    events = EventRecorder(kube, writers=1)
    for name in ("a", "b", "c"):
        events.record(make_pod(name), "Scheduled", f"assigned {name}")  # returns at once: nothing awaited
    assert kube.created == [] and events.backlog == 3
    await events.flush()
    assert [e["involvedObject"]["name"] for e in kube.created] == ["a", "b", "c"]
    assert {e["type"] for e in kube.created} == {"Normal"} and events.backlog == 0


async def test_a_repeat_while_queued_is_counted_on_the_queued_event():
    kube = FakeKube()
    events = EventRecorder(kube)
    pod = make_pod("a")
    for _ in range(3):
        events.record(pod, "Scheduled", "assigned a")
    events.record(pod, "Scheduled", "assigned a elsewhere")  # another message: its own event
    await events.flush()
    assert sorted((e["message"], e["count"]) for e in kube.created) == [("assigned a", 3),
                                                                       ("assigned a elsewhere", 1)]


async def test_a_full_queue_drops_and_counts():
    kube = FakeKube()
    events = EventRecorder(kube, max_queued=2)
    for name in ("a", "b", "c", "d"):
        events.record(make_pod(name), "Scheduled", name)
    await events.flush()
    assert [e["message"] for e in kube.created] == ["a", "b"] and events.dropped == 2


async def test_each_pods_budget_limits_its_events():
    kube = FakeKube()
    events = EventRecorder(kube, budget=EventBudget(burst=2, refill_s=300), clock=lambda: 1000.0)
    for i in range(4):  # one pod, four messages: 2 of the burst written, then the bucket is empty
        events.record(make_pod("a"), "Scheduled", f"m{i}")
    events.record(make_pod("b"), "Scheduled", "m0")  # another pod: its own bucket
    await events.flush()
    assert sorted((e["involvedObject"]["name"], e["message"]) for e in kube.created) == \
        [("a", "m0"), ("a", "m1"), ("b", "m0")]
    assert events.limited == 2


@pytest.mark.parametrize("writers", [1, 4])
async def test_run_writes_in_the_background_up_to_its_writers(writers):
    kube = FakeKube(delay=0.05)
    events = EventRecorder(kube, writers=writers)
    task = asyncio.create_task(events.run())
    try:
        for i in range(8):
            events.record(make_pod(f"p{i}"), "Scheduled", "x")
        async with asyncio.timeout(5):
            while len(kube.created) < 8:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert kube.most == writers
