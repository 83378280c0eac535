"""The bridge service over a real NATS server and the fake API server:
pods become `pod.lifecycle` events, decisions become bindings and
`bind.result`s, node status becomes `node.status`, actions become
taints and evictions with an `action.result` each — for its own cluster."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from conftest import bus_options, make_bus, wait_until
from fake_kube_api import FakeKubeApi
from tidal_bridge.service import BridgeService
from tidal_bridge.settings import BridgeSettings
from tidal_bus import Bus, StartAt
from tidal_clock import Clock, ReplayClock
from tidal_schemas import (GpuShare, NodeAction, NodeAllocatable, NodeAllocatables, NodeStatus, PlacementDecision,
                           PlacementDecisions, Resources, make_envelope)


def settings(nats, namespace, fake, cluster="c1", **overrides) -> BridgeSettings:
    values = dict(bus_url=nats.url, namespace=namespace, cluster=cluster, http_port=0, http_host="127.0.0.1",
                  kube_api_url=fake.url, backoff_initial_s=0.05, backoff_max_s=0.5, api_retry_s=0.05,
                  bind_retry_s=0.01, evict_retry_s=0.2, evict_retry_max_s=0.4, request_timeout_s=5,
                  # A NATS group subscription sometimes fails to close (its membership task loses the
                  # cancellation); the drain timeout bounds how long a test's teardown waits for it.
                  drain_timeout_s=2)
    values.update(overrides)
    return BridgeSettings(**values)


@contextlib.asynccontextmanager
async def running(*configs: BridgeSettings, clock: Clock | None = None):
    """Run a bridge per settings (on `clock`, if given) until the block ends.
    Each gets its own bus connection with a short NATS drain timeout: a group
    subscription of the bus sometimes fails to close (see the report), and
    this bounds the wait."""
    buses = [Bus.from_url(c.bus_url, namespace=c.namespace, cluster=c.cluster, source="bridge",
                          connect_options={"drain_timeout": 2}, **bus_options(c.bus_url)) for c in configs]
    for bus in buses:
        await bus.backend.connect()
    services = tuple(BridgeService(c, bus=bus) for c, bus in zip(configs, buses))
    for service in services if clock is not None else ():
        service.clock = clock
    tasks = [asyncio.create_task(s.run()) for s in services]
    try:
        await wait_until(lambda: all(s.ready()[0] for s in services) or any(t.done() for t in tasks), 20, "ready")
        for task in tasks:
            if task.done():
                task.result()
        yield services
    finally:
        for s in services:
            s.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        for bus in buses:
            await bus.backend.close()


@pytest.fixture
async def fake():
    async with FakeKubeApi() as server:
        server.add_node("n1")
        yield server


@pytest.fixture
async def bus(nats_server, namespace):
    async with make_bus(nats_server.url, namespace, cluster="c1") as connected:
        await connected.ensure_streams()
        yield connected


class Stream:
    """The events of one stream so far (re-read on each call)."""

    def __init__(self, bus, name: str) -> None:
        self.bus, self.name, self.events = bus, name, []

    async def read(self) -> list:
        self.events = [e async for _, e in self.bus.read(self.name, StartAt.earliest()) if not isinstance(e, Exception)]
        return self.events

    async def wait(self, predicate, what: str, timeout: float = 15.0) -> list:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate(await self.read()):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; have {[e.payload for e in self.events]}")
            await asyncio.sleep(0.1)
        return self.events


def decision(name="web", node="n1", decision_id="d1", **fields) -> PlacementDecision:
    return PlacementDecision(decision_id=decision_id, namespace="default", name=name, outcome="placed", node=node,
                             **fields)


def placed(name="web", node="n1", decision_id="d1", **fields) -> PlacementDecisions:
    """One decision, as placement publishes it: an event of a cycle's decisions."""
    return PlacementDecisions.of(decision(name, node, decision_id, **fields))


def published(service, stream: str) -> float:
    return service.metrics.events_out.labels("bridge", stream)._value.get()


# -- Kubernetes -> bus ---------------------------------------------------------------

async def test_pods_are_published_with_parsed_fields_through_their_life(nats_server, namespace, fake, bus):
    fake.add_pod("web", annotations={"tidal.dev/exclusive-cpus": "true", "tidal.dev/cpu-policy": "spread",
                                     "tidal.dev/gpu-count": "2", "tidal.dev/gpu-models": "A100"},
                 labels={"tidal.dev/tenant": "team-a", "tidal.dev/user": "alice"}, cpu="4", memory="8Gi",
                 limits={"cpu": "4", "memory": "8Gi"}, priority=100)
    fake.add_pod("not-ours", scheduler="default-scheduler")
    pods = Stream(bus, "pod.lifecycle")
    async with running(settings(nats_server, namespace, fake)) as (service,):
        await pods.wait(lambda es: len(es) == 1, "pending pod")
        fake.update_pod("default", "web", lambda p: p["metadata"]["annotations"].update({"unrelated": "x"}))
        fake.update_pod("default", "web", lambda p: p["spec"].update(nodeName="n1"))
        fake.update_pod("default", "web",
                        lambda p: p["status"].update(phase="Running", startTime="2026-01-01T00:00:05Z"))
        fake.delete_pod("default", "web")
        events = await pods.wait(lambda es: len(es) == 4, "four phases")
        assert published(service, "pod.lifecycle") == 4  # the unrelated annotation change published nothing
    first = events[0].payload
    assert (first.namespace, first.name, first.phase, first.tenant, first.user, first.qos) == \
        ("default", "web", "pending", "team-a", "alice", "LS")  # limits = requests: Guaranteed -> LS
    assert (first.requests, first.exclusive_cpus, first.cpu_policy, first.priority) == \
        (Resources(cpu_milli=4000, memory_mib=8192), True, "spread", 100)
    assert (first.gpu.count, first.gpu.models, first.invalid_reason) == (2, ["A100"], None)
    assert [(e.payload.phase, e.payload.node) for e in events] == \
        [("pending", None), ("bound", "n1"), ("running", "n1"), ("deleted", "n1")]
    assert events[2].payload.started_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=timezone.utc)
    assert {(e.cluster, e.source, e.key) for e in events} == {("c1", "bridge", "default/web")}


async def test_a_finished_pod_is_deleted_once(nats_server, namespace, fake, bus):
    fake.add_pod("job", node="n1", phase="Running")
    pods = Stream(bus, "pod.lifecycle")
    async with running(settings(nats_server, namespace, fake)) as (service,):
        await pods.wait(lambda es: len(es) == 1, "running job")
        fake.update_pod("default", "job", lambda p: p["status"].update(phase="Succeeded"))
        fake.delete_pod("default", "job")
        await wait_until(lambda: not service.pods.known, 10, "deletion seen")
        events = await pods.wait(lambda es: len(es) == 2, "deleted job")
        assert published(service, "pod.lifecycle") == 2  # Succeeded -> deleted; the DELETED adds nothing
    assert [e.payload.phase for e in events] == ["running", "deleted"]


async def test_broken_watches_and_relists_publish_each_state_once(nats_server, namespace, fake, bus):
    fake.add_pod("a")
    pods = Stream(bus, "pod.lifecycle")
    async with running(settings(nats_server, namespace, fake)) as (service,):
        await pods.wait(lambda es: len(es) == 1, "a")
        fake.update_pod("default", "a", lambda p: p["spec"].update(nodeName="n1"))
        fake.break_watches("partial")
        fake.add_pod("b")
        await pods.wait(lambda es: len(es) == 3, "a bound, b")
        fake.break_watches("abort")
        fake.delete_pod("default", "b")
        fake.add_pod("c")
        fake.compact()  # the reconnect gets 410 and relists: a and c come again in the list
        events = await pods.wait(lambda es: len(es) == 5, "b deleted, c")
        await wait_until(lambda: service.pods.stats.lists == 2, 10, "relist")
        assert published(service, "pod.lifecycle") == 5  # nothing published twice, even before bus dedupe
    assert [(e.payload.name, e.payload.phase) for e in events] == \
        [("a", "pending"), ("a", "bound"), ("b", "pending"), ("b", "deleted"), ("c", "pending")] or \
        [(e.payload.name, e.payload.phase) for e in events] == \
        [("a", "pending"), ("a", "bound"), ("b", "pending"), ("c", "pending"), ("b", "deleted")]


async def test_a_pod_made_again_under_its_name_while_the_watch_was_down_ends_the_names_events(
        nats_server, namespace, fake, bus):
    """A StatefulSet's pod deleted and made again during a watch gap: the
    relist lists the successor before it finds the old uid missing. The
    old pod's deletion is published first, so readers that key pods by
    name (fair share, oversell, placement) end holding the successor."""
    fake.add_pod("web-0", node="n1", phase="Running")
    pods = Stream(bus, "pod.lifecycle")
    async with running(settings(nats_server, namespace, fake)):
        await pods.wait(lambda es: len(es) == 1, "web-0 running")
        fake.break_watches("abort")
        fake.delete_pod("default", "web-0")
        successor = fake.add_pod("web-0", node="n1", phase="Running")
        fake.compact()  # the reconnect gets 410 and relists
        events = await pods.wait(lambda es: len(es) == 3, "the old web-0 deleted, its successor running")
    assert [(e.payload.phase, e.payload.uid) for e in events[1:]] == \
        [("deleted", events[0].payload.uid), ("running", successor["metadata"]["uid"])]


async def test_a_malformed_annotation_publishes_an_unschedulable_pod_and_a_kubernetes_event(
        nats_server, namespace, fake, bus):
    fake.add_pod("bad", annotations={"tidal.dev/gpu-milli": "1500"})
    pods = Stream(bus, "pod.lifecycle")
    reason = 'annotation tidal.dev/gpu-milli: "1500" is not in 1..1000'
    async with running(settings(nats_server, namespace, fake)):
        events = await pods.wait(lambda es: len(es) == 1, "bad pod")
        await wait_until(lambda: len(fake.events) == 1, 10, "kubernetes event")
        fake.update_pod("default", "bad", lambda p: p["metadata"]["labels"].update(app="x"))  # same reason again
        await pods.wait(lambda es: len(es) == 2, "relabelled pod")
    assert (events[0].payload.phase, events[0].payload.invalid_reason) == ("pending", reason)
    (event,) = fake.events.values()
    assert (event["reason"], event["type"], event["message"]) == ("TidalInvalidAnnotation", "Warning", reason)
    assert event["involvedObject"]["name"] == "bad" and event["involvedObject"]["kind"] == "Pod"
    # a second bridge (a restart, another replica) does not report it again: same event name -> 409
    async with running(settings(nats_server, namespace, fake)):
        await wait_until(lambda: fake.count("POST", "/events") == 2, 10, "second report attempt")
    assert len(fake.events) == 1


async def test_node_facts_only_when_asked(nats_server, namespace, fake, bus):
    fake.add_node("gpu1", cpu="32", memory="128Gi", gpus=4, labels={"pool": "gpu"},
                  allocatable={"cpu": "31", "memory": "120Gi"})
    topologies = Stream(bus, "node.topology")
    async with running(settings(nats_server, namespace, fake)):
        # the nodes are watched all the same (the binder's cache), once listed: none was published
        await wait_until(lambda: any(path == "/api/v1/nodes" and query.get("watch")
                                     for _, path, query in fake.requests), 10, "the nodes watched")
    assert await topologies.read() == []
    async with running(settings(nats_server, namespace, fake, publish_node_facts=True)):
        events = await topologies.wait(lambda es: len(es) == 2, "n1 and gpu1")
        fake.update_node("gpu1", lambda n: n["metadata"]["annotations"].update(note="x"))  # not a fact
        fake.update_node("gpu1", lambda n: n["metadata"]["labels"].update(zone="b"))
        events = await topologies.wait(lambda es: len(es) == 3, "relabelled gpu1")
    gpu1 = [e.payload for e in events if e.payload.node == "gpu1"]
    assert gpu1[0].capacity == Resources(cpu_milli=32000, memory_mib=131072, gpu_milli=4000)
    assert gpu1[0].allocatable == Resources(cpu_milli=31000, memory_mib=122880, gpu_milli=4000)
    assert (gpu1[0].numa_nodes, gpu1[-1].labels["zone"]) == ([], "b")


# -- bus -> Kubernetes ------------------------------------------------------------------

async def test_a_placed_decision_is_persisted_bound_and_reported(nats_server, namespace, fake, bus):
    fake.add_pod("web")
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish(placed(numa_cpus={0: 1}))
        await bus.publish(PlacementDecisions.of(PlacementDecision(
            decision_id="d0", namespace="default", name="web", outcome="pending", reason="quota")))
        (result,) = await results.wait(lambda es: len(es) == 1, "bind result")
    assert (result.payload.ok, result.payload.node, result.payload.decision_id) == (True, "n1", "d1")
    assert result.cluster == "c1" and result.causation_id is not None
    pod = fake.pod("default", "web")
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"]["tidal.dev/numa-cpus"] == '{"0":1}'
    assert [e["reason"] for e in fake.events.values()] == ["Scheduled"]
    # a restarted bridge does not carry out the same decision again
    async with running(settings(nats_server, namespace, fake)):
        await asyncio.sleep(1.0)
    assert fake.count("POST", "/binding") == 1 and len(await results.read()) == 1


async def test_a_cycles_decisions_in_one_event_are_each_carried_out(nats_server, namespace, fake, bus):
    for name in ("a", "b", "c"):
        fake.add_pod(name)
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish(PlacementDecisions.of(
            decision("a", decision_id="da"), decision("b", decision_id="db"),
            PlacementDecision(decision_id="dc", namespace="default", name="c", outcome="pending",
                              reason="0/2 nodes fit: 2 cpu", filtered={"cpu": 2}, nodes=2)))
        events = await results.wait(lambda es: len(es) == 2, "two bind results")
        await wait_until(lambda: fake.count("PATCH", "/status") == 1, 30, "the pending pod explained")
    assert sorted((e.payload.decision_id, e.payload.node, e.payload.ok) for e in events) == \
        [("da", "n1", True), ("db", "n1", True)]  # bound side by side: the results in either order
    assert len({e.id for e in events}) == 2  # one cause, two outputs: each its own id
    assert [fake.pod("default", name)["spec"].get("nodeName") for name in "abc"] == ["n1", "n1", None]


@pytest.mark.parametrize("events", ["one event", "an event each"])
async def test_pods_are_bound_side_by_side_up_to_the_limit(nats_server, namespace, fake, bus, events):
    # Each binding waits on a slow API server: the pods' binds overlap, at most bind_concurrency at a time,
    # whether they come in one event (a burst) or an event each (pods arriving one by one).
    names = [f"p{i}" for i in range(6)]
    for name in names:
        fake.add_pod(name)
    fake.slow("POST", "/binding", 0.3)
    in_flight, most = [0], [0]

    def started(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/binding"):
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])

    def answered(pod: dict, node: str) -> None:  # the binding's handler, once its wait is over: admitted
        in_flight[0] -= 1

    fake.on_request, fake.admit_binding = started, answered
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake, bind_concurrency=4)):
        decided = [decision(name, decision_id=f"d-{name}") for name in names]
        for batch in [decided] if events == "one event" else [[d] for d in decided]:
            await bus.publish(PlacementDecisions.of(*batch))
        found = await results.wait(lambda es: len(es) == len(names), "every bind result")
    assert most[0] == 4
    assert sorted(e.payload.decision_id for e in found if e.payload.ok) == [f"d-{name}" for name in names]
    assert all(fake.pod("default", name)["spec"]["nodeName"] == "n1" for name in names)


async def test_a_pending_decision_read_during_the_pods_bind_waits_for_it(nats_server, namespace, fake, bus):
    # Read while the bind is under way (an older pending decision, read late): once the pod is bound, it
    # must not be marked unschedulable.
    fake.add_pod("web")
    fake.slow("POST", "/binding", 0.5)
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake)) as (bridge,):
        await bus.publish(placed())
        await wait_until(lambda: fake.count("POST", "/binding") == 1, 15, "the binding under way")
        await bus.publish(PlacementDecisions.of(PlacementDecision(
            decision_id="d0", namespace="default", name="web", outcome="pending", reason="quota")))
        await results.wait(lambda es: len(es) == 1, "bind result")
        await asyncio.sleep(0.5)
        assert bridge.pod_status.backlog == 0
    assert fake.count("PATCH", "/status") == 0
    assert [e["reason"] for e in fake.events.values()] == ["Scheduled"]


async def test_one_pods_decisions_in_one_event_are_carried_out_in_turn(nats_server, namespace, fake, bus):
    # Side by side, the second would annotate the pod while the first binds it.
    fake.add_node("n2")
    fake.add_pod("web")
    fake.slow("POST", "/binding", 0.2)
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish(PlacementDecisions.of(decision(node="n1", decision_id="d1"),
                                                decision(node="n2", decision_id="d2")))
        events = await results.wait(lambda es: len(es) == 2, "two bind results")
    assert [(e.payload.decision_id, e.payload.ok, e.payload.reason, e.payload.bound_to) for e in events] == [
        ("d1", True, "", None), ("d2", False, "pod default/web is already bound to node n1", "n1")]
    pod = fake.pod("default", "web")
    assert (pod["spec"]["nodeName"], pod["metadata"]["annotations"]["tidal.dev/decision-id"]) == ("n1", "d1")


async def test_gpu_pods_of_one_size_on_one_node_are_bound_one_admission_at_a_time(nats_server, namespace, fake,
                                                                                   bus):
    # The device plugin matches a kubelet call to the oldest decision of its size, so the second pod of that
    # size on the node is bound only once the kubelet has taken in the first; other sizes are not held.
    for name in ("first", "second", "half"):
        fake.add_pod(name)
    results = Stream(bus, "bind.result")

    def gpus(*shares):
        return [GpuShare(gpu=gpu, milli=milli) for gpu, milli in shares]
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish(PlacementDecisions.of(
            decision("first", decision_id="d1", gpus=gpus(("g0", 1000), ("g1", 1000))),
            decision("second", decision_id="d2", gpus=gpus(("g2", 1000), ("g3", 1000))),
            decision("half", decision_id="d3", gpus=gpus(("g4", 500)))))
        await results.wait(lambda es: {e.payload.decision_id for e in es} == {"d1", "d3"}, "two bind results")
        await asyncio.sleep(1.0)
        assert fake.pod("default", "second")["spec"].get("nodeName") is None
        fake.update_pod("default", "first", lambda pod: pod.setdefault("status", {}).update(
            phase="Running", startTime="2026-12-02T00:00:00Z"))  # as its kubelet, once admitted
        found = await results.wait(lambda es: len(es) == 3, "the second pod's bind result")
    assert [e.payload.decision_id for e in found][-1] == "d2" and all(e.payload.ok for e in found)


async def test_a_binding_never_waits_behind_pending_pods_explained(nats_server, namespace, fake, bus):
    # Placement retrying its waiting pods publishes a pending decision for each:
    # with a slow API server, writing them all before the next binding would
    # hold that binding back (and past placement's bind timeout at scale).
    waiting = [f"waiting-{i}" for i in range(20)]
    for name in [*waiting, "web"]:
        fake.add_pod(name)
    fake.slow("PATCH", "/status", 0.2)
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake)) as (bridge,):
        for i, name in enumerate(waiting):
            await bus.publish(PlacementDecisions.of(PlacementDecision(
                decision_id=f"w{i}", namespace="default", name=name, outcome="pending", reason="0/1 nodes fit: 1 cpu",
                nodes=1)))
        await bus.publish(placed())
        await results.wait(lambda es: len(es) == 1, "bind result")
        written = fake.count("PATCH", "/status")
        assert written < len(waiting) / 2, f"the binding came after {written} of {len(waiting)} status writes"
        await wait_until(lambda: fake.count("PATCH", "/status") == len(waiting), 30, "every pending pod explained")
        assert bridge.pod_status.backlog == 0
    assert fake.pod("default", "web")["spec"]["nodeName"] == "n1"


async def test_a_lasting_binding_conflict_reports_a_failed_bind_result(nats_server, namespace, fake, bus):
    fake.add_pod("web")
    fake.conflict_binding("default", "web", times=99)
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake, bind_attempts=3)):
        await bus.publish(placed())
        (result,) = await results.wait(lambda es: len(es) == 1, "bind result")
    assert result.payload.ok is False
    assert result.payload.reason.startswith("binding conflict after 3 attempt(s)")
    assert fake.count("POST", "/binding") == 3
    assert "tidal.dev/decision-id" not in fake.pod("default", "web")["metadata"]["annotations"]


@pytest.mark.parametrize("decision, reason", [
    (placed(name="ghost"), "pod default/ghost is gone"),
    (placed(node="n9"), "node n9 is gone"),
])
async def test_bind_failures_let_placement_roll_back(nats_server, namespace, fake, bus, decision, reason):
    fake.add_pod("web")
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish(decision)
        (result,) = await results.wait(lambda es: len(es) == 1, "bind result")
    assert (result.payload.ok, result.payload.reason) == (False, reason)


async def test_an_unreachable_api_server_is_retried_then_reported(nats_server, namespace, fake, bus):
    fake.add_pod("web")
    fake.fail("POST", "/pods/web/binding", 503, times=99)  # the pod and node read from the watches: a bind's one request
    results = Stream(bus, "bind.result")
    async with running(settings(nats_server, namespace, fake, api_attempts=3)):
        await bus.publish(placed())
        (result,) = await results.wait(lambda es: len(es) == 1, "bind result")
    assert result.payload.ok is False
    assert result.payload.reason.startswith("API server failed after 3 attempt(s): 503")
    assert fake.count("POST", "/pods/web/binding") == 3


async def test_node_status_is_published_when_its_allocatable_changes_and_oversell_is_not_written(
        nats_server, namespace, fake, bus):
    """status.allocatable → `node.status` on change only (a heartbeat, an
    annotation, a capacity change publish nothing), its deletion once; and
    oversell's figures are no business of the bridge's: no node is patched.
    The stream keeps each node's last event only: what was published is counted."""
    statuses = Stream(bus, "node.status")

    async def last(what: str):
        (event,) = await statuses.wait(lambda es: len(es) == 1 and what == _status(es[0].payload), what)
        return event

    async with running(settings(nats_server, namespace, fake)) as (service,):
        await last("8000m/32768Mi")
        await bus.publish(NodeAllocatables.of(NodeAllocatable(
            node="n1", policy="bounded", factor=1.2, capacity=Resources(cpu_milli=8000, memory_mib=32768),
            allocatable=Resources(cpu_milli=9600, memory_mib=32768))))
        fake.update_node("n1", lambda n: n["metadata"]["annotations"].update(note="x"))
        fake.update_node("n1", lambda n: n["status"]["conditions"].append({"type": "MemoryPressure",
                                                                           "status": "False"}))
        fake.update_node("n1", lambda n: n["status"]["capacity"].update(cpu="9"))  # allocatable is what counts
        fake.update_node("n1", lambda n: n["status"]["allocatable"].update(cpu="9600m"))  # the webhook's figure
        await last("9600m/32768Mi")
        fake.update_node("n1", lambda n: n["status"]["allocatable"].update(memory="32Gi"))  # the same: nothing
        fake.store.write("nodes", "DELETED", copy.deepcopy(fake.node("n1")))
        await last("deleted")
        assert published(service, "node.status") == 3  # 8000m, 9600m, deleted: one a change
    assert fake.count("PATCH", "/nodes/") == 0


async def test_a_node_deleted_while_no_bridge_ran_is_published_deleted_at_start(nats_server, namespace, fake, bus):
    await bus.publish(NodeStatus(node="gone", allocatable=Resources(cpu_milli=8000, memory_mib=32768)))
    await bus.publish(NodeStatus(node="n1", allocatable=Resources(cpu_milli=1000, memory_mib=1024)))
    statuses = Stream(bus, "node.status")
    async with running(settings(nats_server, namespace, fake)) as (service,):
        events = await statuses.wait(lambda es: {_status(e.payload) for e in es} == {"deleted", "8000m/32768Mi"},
                                     "gone deleted, n1 as its object says")
        assert {e.payload.node: _status(e.payload) for e in events} == {"gone": "deleted", "n1": "8000m/32768Mi"}
        await wait_until(lambda: published(service, "node.status") == 2, 10, "two published")
    assert published(service, "node.status") == 2  # n1 is not deleted: its object is there


def _status(status) -> str:
    figures = status.allocatable
    return "deleted" if status.deleted else f"{figures.cpu_milli}m/{figures.memory_mib}Mi"


def act(action_id, kind, **fields) -> NodeAction:
    if kind in ("taint", "untaint"):
        fields.setdefault("taint_key", "tidal.dev/overloaded")
    return NodeAction(action_id=action_id, node="n1", kind=kind, reason="load", **fields)


async def test_taint_untaint_dry_run_and_foreign_actions(nats_server, namespace, fake, bus):
    other = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
    fake.update_node("n1", lambda n: n["spec"].update(taints=[other]))
    results = Stream(bus, "action.result")
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish(act("t1", "taint"))
        await bus.publish(act("t2", "taint"))
        first = await results.wait(lambda es: len(es) == 2, "taints")
        tainted = list(fake.node("n1")["spec"]["taints"])
        await bus.publish(act("f1", "freeze", pod="default/web"))  # the node agent's, not ours
        await bus.publish(act("u0", "untaint", dry_run=True))
        await bus.publish(act("u1", "untaint"))
        events = await results.wait(lambda es: len(es) == 4, "untaints")
    assert tainted == [other, {"key": "tidal.dev/overloaded", "effect": "NoSchedule"}]
    assert fake.node("n1")["spec"]["taints"] == [other]
    assert [(e.payload.action_id, e.payload.status) for e in events] == \
        [("t1", "done"), ("t2", "done"), ("u0", "skipped"), ("u1", "done")]
    assert first[1].payload.reason == "taint tidal.dev/overloaded:NoSchedule already present"
    assert events[2].payload.reason == "dry run: not executed"


async def test_a_stale_action_is_not_carried_out(nats_server, namespace, fake, bus):
    fake.add_pod("web", node="n1", phase="Running")
    results = Stream(bus, "action.result")
    old = datetime.now(timezone.utc) - timedelta(hours=2)
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish_envelope(make_envelope(act("e1", "evict", pod="default/web"), cluster="c1",
                                                 source="oversell", time=old))
        (result,) = await results.wait(lambda es: len(es) == 1, "result")
    # 7200 s and the seconds the bridge took to read it (a loaded machine: more than one)
    assert result.payload.status == "skipped" and re.fullmatch(r"stale: issued 72[0-5]\ds ago \(limit 600s\)",
                                                                result.payload.reason), result.payload.reason
    assert fake.evictions == []


async def test_an_actions_age_is_read_on_the_bridges_clock(nats_server, namespace, fake, bus):
    # the machine's clock is years from 2030: only the injected one makes these 700 s and 50 s old
    issued = datetime(2030, 1, 1, tzinfo=timezone.utc)
    results = Stream(bus, "action.result")
    async with running(settings(nats_server, namespace, fake), clock=ReplayClock(issued.timestamp() + 700)):
        for action_id, at in (("t-old", issued), ("t-new", issued + timedelta(seconds=650))):
            await bus.publish_envelope(make_envelope(act(action_id, "taint"), cluster="c1", source="oversell",
                                                     time=at))
        events = await results.wait(lambda es: len(es) == 2, "both results")
    assert [(e.payload.action_id, e.payload.status, e.payload.reason) for e in events] == [
        ("t-old", "skipped", "stale: issued 700s ago (limit 600s)"),
        ("t-new", "done", "taint tidal.dev/overloaded:NoSchedule added")]


async def test_an_eviction_held_by_a_budget_is_retried_later_without_holding_others(
        nats_server, namespace, fake, bus):
    fake.add_pod("web", node="n1", phase="Running")
    fake.block_eviction("default", "web", times=2)
    results = Stream(bus, "action.result")
    async with running(settings(nats_server, namespace, fake)):
        await bus.publish(act("e1", "evict", pod="default/web"))
        await bus.publish(act("t1", "taint"))
        events = await results.wait(lambda es: len(es) == 2, "eviction and taint")
    assert [(e.payload.action_id, e.payload.status) for e in events] == [("t1", "done"), ("e1", "done")]
    assert fake.count("POST", "/eviction") == 3 and fake.evictions == [("default", "web")]


async def test_an_eviction_the_budget_never_allows_is_reported_refused(nats_server, namespace, fake, bus):
    fake.add_pod("web", node="n1", phase="Running")
    fake.block_eviction("default", "web", times=99)
    results = Stream(bus, "action.result")
    async with running(settings(nats_server, namespace, fake, evict_attempts=3, evict_retry_s=0.1,
                                evict_retry_max_s=0.1)):
        await bus.publish(act("e1", "evict", pod="default/web"))
        (result,) = await results.wait(lambda es: len(es) == 1, "refused")
    assert result.payload.status == "refused" and "disruption budget" in result.payload.reason
    assert fake.count("POST", "/eviction") == 3 and fake.pod("default", "web") is not None


# -- several clusters on one bus ---------------------------------------------------------

async def test_two_clusters_share_a_bus_and_each_bridge_acts_only_on_its_own(nats_server, namespace, bus):
    async with FakeKubeApi() as east, FakeKubeApi() as west:
        for fake, node in ((east, "e1"), (west, "w1")):
            fake.add_node(node)
            fake.add_pod("web")  # the same pod name in both clusters
        pods, results = Stream(bus, "pod.lifecycle"), Stream(bus, "bind.result")
        async with running(settings(nats_server, namespace, east, cluster="east"),
                           settings(nats_server, namespace, west, cluster="west")) as (east_bridge, west_bridge):
            # the runtime itself hands each bridge only its own cluster's events
            assert {c.clusters for c in east_bridge.consumers} == {frozenset({"east"})}
            assert {c.clusters for c in west_bridge.consumers} == {frozenset({"west"})}
            await pods.wait(lambda es: len(es) == 2, "both pods")
            await bus.publish(placed(node="w1", decision_id="dw"), cluster="west")
            await bus.publish(placed(node="e1", decision_id="de"), cluster="east")
            for i in range(4):  # more decisions, spread over partitions, for pods the other cluster also has
                east.add_pod(f"p{i}")
                west.add_pod(f"p{i}")
                await bus.publish(placed(name=f"p{i}", node="e1", decision_id=f"de{i}"), cluster="east")
            events = await results.wait(lambda es: len(es) == 6, "six bind results")
    # keys land in different partitions, so only the set is fixed, not the order
    assert sorted(east.bindings) == [("default", f"p{i}", "e1") for i in range(4)] + [("default", "web", "e1")]
    assert west.bindings == [("default", "web", "w1")]
    assert {(e.cluster, e.payload.decision_id, e.payload.ok) for e in events} == \
        {("west", "dw", True), ("east", "de", True)} | {("east", f"de{i}", True) for i in range(4)}
    web = [e for e in await pods.read() if e.payload.name == "web" and e.payload.phase == "pending"]
    assert sorted(e.cluster for e in web) == ["east", "west"]
    assert {e.payload.uid for e in web} == {east.pod("default", "web")["metadata"]["uid"],
                                            west.pod("default", "web")["metadata"]["uid"]}


def test_a_bridge_only_handles_its_own_cluster(monkeypatch):
    assert BridgeSettings(cluster="east").handled_clusters() == frozenset({"east"})
    assert BridgeSettings(cluster="east", clusters=["east"]).handled_clusters() == frozenset({"east"})
    with pytest.raises(ValidationError, match="only its own cluster"):
        BridgeSettings(cluster="east", clusters=["east", "west"])
    with pytest.raises(ValidationError, match="only its own cluster"):
        BridgeSettings(cluster="east", all_clusters=True)


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("TIDAL_CLUSTER", "eu-1")
    monkeypatch.setenv("TIDAL_BRIDGE_KUBE_API_URL", "http://127.0.0.1:8001")
    monkeypatch.setenv("TIDAL_BRIDGE_SCHEDULER_NAME", "tidal-gpu")
    monkeypatch.setenv("TIDAL_BRIDGE_PUBLISH_NODE_FACTS", "true")
    monkeypatch.setenv("TIDAL_BRIDGE_EVICT_ATTEMPTS", "4")
    loaded = BridgeSettings()
    assert (loaded.cluster, loaded.kube_api_url) == ("eu-1", "http://127.0.0.1:8001")
    assert loaded.scheduler_name == "tidal-gpu"
    assert (loaded.publish_node_facts, loaded.evict_attempts) == (True, 4)
    service = BridgeService(loaded)
    assert (service.group, service.evictions_group) == ("bridge-eu-1", "bridge-eu-1-evictions")
