"""A pod Tidal cannot place is explained on the pod, as kube-scheduler does
it (issue 20 item 1), on the path a real cluster takes: the (simulated,
real wire protocol) API server → the real bridge (kubernetes-asyncio) →
the real placement service over a real NATS server → back to the API
server. Read back as `kubectl describe pod` reads it: the pod's
`PodScheduled` condition and its events by field selector."""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client

from conftest import make_bus, patience, wait_until
from fake_kube_api import FakeKubeApi
from test_cluster_path import CLUSTER, Path, cpu_node
from tidal_bridge.service import BridgeService
from tidal_bridge.settings import BridgeSettings

NO_ROOM = "0/1 nodes are available: 1 Insufficient cpu."


@contextlib.asynccontextmanager
async def explained(nats_server, namespace, *, event_burst: int, event_refill_s: float):
    """A cluster of one 4-CPU node; placement tries a waiting pod again every
    ~0.5s (its permit timeout, and a back-off of 0.1 s doubling up to 0.5 s,
    not 1 s up to 10 s) and publishes every attempt (pending_repeat_s=0)."""
    async with FakeKubeApi() as kube, make_bus(nats_server.url, namespace, cluster=CLUSTER) as bus, \
            client.ApiClient(client.Configuration(host=kube.url)) as reader:
        await bus.ensure_streams()
        kube.add_node("n1", cpu="4")
        await bus.publish(cpu_node("n1", cpus_per_numa=2))
        path = Path(kube, bus, nats_server.url, namespace)
        path.core = client.CoreV1Api(reader)
        await path.start(BridgeService(BridgeSettings(
            bus_url=nats_server.url, namespace=namespace, cluster=CLUSTER, http_port=0, http_host="127.0.0.1",
            kube_api_url=kube.url, backoff_initial_s=0.05, backoff_max_s=0.5, api_retry_s=0.05, bind_retry_s=0.01,
            request_timeout_s=5, drain_timeout_s=2, event_burst=event_burst, event_refill_s=event_refill_s),
            bus=await path.own_bus("bridge")))
        await path.start_placement(permit_timeout_s=0.5, pending_repeat_s=0, retry_backoff_s=0.1,
                                   retry_backoff_max_s=0.5)
        try:
            yield path
        finally:
            for service, task in reversed(path.services):
                service.stop()
                with contextlib.suppress(BaseException):
                    await task
            for own in path.buses:
                await own.backend.close()


async def eventually(predicate, timeout: float, what: str) -> None:
    """`wait_until` for a predicate that reads the API server."""
    deadline = asyncio.get_running_loop().time() + patience(timeout)
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {patience(timeout):g}s waiting for {what}")
        await asyncio.sleep(0.05)


async def scheduled(path: Path, name: str) -> client.V1PodCondition | None:
    pod = await path.core.read_namespaced_pod_status(name, "default")
    return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)


async def failed_scheduling(path: Path, name: str) -> list[client.CoreV1Event]:
    """The pod's FailedScheduling events, found as kubectl describe finds them."""
    pod = await path.core.read_namespaced_pod(name, "default")
    events = await path.core.list_namespaced_event("default", field_selector=(
        f"involvedObject.name={name},involvedObject.namespace=default,involvedObject.uid={pod.metadata.uid}"))
    return [e for e in events.items if e.reason == "FailedScheduling"]


async def test_an_unplaceable_pod_gets_the_condition_and_one_event_counting_the_attempts(nats_server, namespace):
    async with explained(nats_server, namespace, event_burst=100, event_refill_s=0.01) as path:
        path.pod("big", cpu="8")
        counts: list[int] = []

        async def counted() -> bool:
            events = await failed_scheduling(path, "big")
            assert len(events) <= 1, [(e.metadata.name, e.message) for e in events]
            counts.extend(e.count for e in events)
            return bool(events) and events[0].count >= 4
        await eventually(counted, 30, "the FailedScheduling event counted 4 attempts")
        (event,) = await failed_scheduling(path, "big")
        assert (event.type, event.message, event.source.component) == ("Warning", NO_ROOM, "tidal-bridge")
        assert event.last_timestamp > event.first_timestamp
        assert counts == sorted(counts)  # one object, its count growing
        condition = await scheduled(path, "big")
        assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", NO_ROOM)

        # room appears: the pod is placed, bound, and scheduled
        path.kube.add_node("n2", cpu="16")
        await path.bus.publish(cpu_node("n2", cpus_per_numa=8))
        await path.wait_bound("big")
        condition = await scheduled(path, "big")
        assert (condition.status, condition.reason, condition.message) == ("True", None, None)
        settled = (await failed_scheduling(path, "big"))[0].count
        await path.settle(1.5)  # three permit timeouts: no attempt, no count, no False again
        assert (await failed_scheduling(path, "big"))[0].count == settled
        assert (await scheduled(path, "big")).status == "True"


async def test_a_pod_tried_every_cycle_costs_the_api_server_its_event_budget_only(nats_server, namespace):
    async with explained(nats_server, namespace, event_burst=2, event_refill_s=3600) as path:
        path.pod("big", cpu="8")
        await wait_until(lambda: path.kube.pod("default", "big") is not None, 5, "pod created")
        placement = path.placement

        def attempts() -> int:
            entry = placement.clusters[CLUSTER].queue.entries.get("default/big")
            return entry.attempts if entry else 0
        await wait_until(lambda: attempts() >= 6, 30, "six attempts")
        await wait_until(lambda: sum(1 for _, e in path.kube.events.items()
                                     if e["reason"] == "FailedScheduling" and e["count"] == 2), 10, "count 2")
        # a pod held back behind it: Tidal's own reason, in kube-scheduler's form
        path.pod("small", cpu="1", priority=0)
        await wait_until(lambda: (c := _condition(path, "small")) is not None and "waiting behind" in c["message"],
                         20, "small explained")
        assert _condition(path, "small")["message"] == \
            "0/1 nodes are available: waiting behind a higher-priority cpu pod."
        await path.settle(1.0)
        (event,) = await failed_scheduling(path, "big")
        assert event.count == 2  # the burst, then nothing for an hour however often it is tried
        assert [e for e in path.kube.events.values() if e["involvedObject"]["name"] == "big"] == \
            [path.kube.events[("default", event.metadata.name)]]  # one object ...
        patches = [p for m, p, _ in path.kube.requests
                   if m == "PATCH" and p == f"/api/v1/namespaces/default/events/{event.metadata.name}"]
        assert len(patches) == 1  # ... created once, counted once
        # the condition is written when its message changes, not on every attempt
        status_writes = [p for m, p, _ in path.kube.requests if m == "PATCH" and p.endswith("/pods/big/status")]
        assert len(status_writes) == 1 and attempts() >= 6


def _condition(path: Path, name: str) -> dict | None:
    pod = path.kube.pod("default", name) or {}
    return next((c for c in (pod.get("status") or {}).get("conditions", []) if c["type"] == "PodScheduled"), None)
