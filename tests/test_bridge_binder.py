"""Binding and node actions through kubernetes-asyncio against the fake API
server, without the bus: every refusal is a precise outcome, conflicts are
retried with back-off, taints are idempotent, evictions never forced."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from conftest import wait_until
from fake_kube_api import FakeKubeApi
from tidal_bridge.actuator import Actuator
from tidal_bridge.binder import Binder
from tidal_bridge.errors import KubeStatusError
from tidal_bridge.kube import Kube
from tidal_bridge.node_watch import slim_node
from tidal_bridge.settings import BridgeSettings
from tidal_bridge.watch import Reflector
from tidal_schemas import GpuShare, NodeAction, PlacementDecision


@pytest.fixture
async def fake():
    async with FakeKubeApi() as server:
        server.add_node("n1")
        server.add_node("n2")
        yield server


@pytest.fixture
async def kube(fake):
    api = await Kube.connect(BridgeSettings(kube_api_url=fake.url, request_timeout_s=5))
    yield api
    await api.close()


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def decision(name="p", node="n1", decision_id="d1", uid="", **fields) -> PlacementDecision:
    return PlacementDecision(decision_id=decision_id, namespace="default", name=name, uid=uid, outcome="placed",
                             node=node, **fields)


def binder(kube, sleeps=None, attempts=3) -> Binder:
    return Binder(kube, scheduler_name="tidal", attempts=attempts, retry_s=0.2, sleep=sleeps or Sleeps())


async def test_bind_persists_the_decision_and_binds_in_one_write(fake, kube):
    fake.add_pod("p")
    outcome = await binder(kube).bind(decision(numa_cpus={0: 2, 1: 2}, gpus=[GpuShare(gpu="g0", milli=1000)]))
    assert (outcome.ok, outcome.reason) == (True, "")
    pod = fake.pod("default", "p")
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"] == {"tidal.dev/decision-id": "d1", "tidal.dev/numa-cpus": '{"0":2,"1":2}',
                                              "tidal.dev/gpus": '[{"gpu":"g0","milli":1000}]'}
    assert fake.bindings == [("default", "p", "n1")]
    # the Binding carries the annotations (and the pod's uid as precondition): nothing written before it
    assert fake.count("PATCH", "/pods/p") == 0 and fake.count("POST", "/pods/p/binding") == 1


async def test_a_redelivered_decision_is_already_done(fake, kube):
    fake.add_pod("p")
    first = await binder(kube).bind(decision())
    again = await binder(kube).bind(decision())
    assert first.ok and (again.ok, again.reason) == (True, "already bound by this decision")
    assert fake.count("POST", "/binding") == 1


def _set(path: str, value):
    def change(pod):
        target = pod
        *parents, last = path.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return change


@pytest.mark.parametrize("prepare, made, reason", [
    (None, decision(name="ghost"), "pod default/ghost is gone"),
    (None, decision(node="n9"), "node n9 is gone"),
    (("nodes", "n1", _set("spec.unschedulable", True)), decision(), "node n1 is cordoned (spec.unschedulable)"),
    (("pods", "p", _set("spec.nodeName", "n2")), decision(), "pod default/p is already bound to node n2"),
    (("pods", "p", _set("metadata.deletionTimestamp", "2026-01-01T00:00:00Z")), decision(),
     "pod default/p is terminating"),
    (("pods", "p", _set("status.phase", "Failed")), decision(), "pod default/p has finished (Failed)"),
    (("pods", "p", _set("spec.schedulerName", "default-scheduler")), decision(),
     "pod default/p has schedulerName 'default-scheduler', not 'tidal'"),
    (None, decision(uid="old-uid"), "pod default/p was replaced: uid is {uid}, the decision was for old-uid"),
])
async def test_refusals_are_outcomes_with_a_reason(fake, kube, prepare, made, reason):
    pod = fake.add_pod("p")
    if prepare is not None:
        resource, name, change = prepare
        if resource == "pods":
            fake.update_pod("default", name, change)
        else:
            fake.update_node(name, change)
    outcome = await binder(kube).bind(made)
    assert (outcome.ok, outcome.reason) == (False, reason.format(uid=pod["metadata"]["uid"]))
    assert fake.bindings == [] and "tidal.dev/decision-id" not in fake.pod("default", "p")["metadata"]["annotations"]


async def test_a_transient_conflict_is_retried_with_back_off(fake, kube):
    fake.add_pod("p")
    fake.conflict_binding("default", "p", times=2)
    sleeps = Sleeps()
    outcome = await binder(kube, sleeps).bind(decision())
    assert outcome.ok and fake.count("POST", "/binding") == 3
    assert sleeps.delays == [0.2, 0.4]  # retry_s · 2^(n−1)


async def test_a_lasting_conflict_fails_and_persists_nothing(fake, kube):
    fake.add_pod("p")
    fake.conflict_binding("default", "p", times=99)
    sleeps = Sleeps()
    outcome = await binder(kube, sleeps, attempts=3).bind(decision())
    assert not outcome.ok
    assert outcome.reason.startswith("binding conflict after 3 attempt(s): Operation cannot be fulfilled")
    assert fake.count("POST", "/binding") == 3 and sleeps.delays == [0.2, 0.4]
    pod = fake.pod("default", "p")
    assert "nodeName" not in pod["spec"] and pod["metadata"]["annotations"] == {}


async def test_a_server_error_on_binding_raises_for_a_later_retry(fake, kube):
    fake.add_pod("p")
    fake.fail("POST", "/binding", 503)
    with pytest.raises(KubeStatusError) as caught:
        await binder(kube).bind(decision())
    assert caught.value.retriable
    assert (await binder(kube).bind(decision())).ok  # the retry succeeds


# -- the watches' caches -------------------------------------------------------------

async def _sink(change) -> None:
    return None


@contextlib.asynccontextmanager
async def watched(kube, follow: bool = True):
    """The bridge's pod and node caches over the fake, listed; with `follow`
    False they stop there: a cache that no longer sees changes (gone stale)."""
    pods, nodes = Reflector(kube, "pods", _sink), Reflector(kube, "nodes", _sink, keep=slim_node)
    tasks = [asyncio.create_task(r.run()) for r in (pods, nodes)]
    try:
        await wait_until(lambda: pods.synced.is_set() and nodes.synced.is_set(), 10, "listed")
        if not follow:
            for task in tasks:
                task.cancel()
        yield Binder(kube, scheduler_name="tidal", attempts=3, retry_s=0.2, sleep=Sleeps(), pods=pods, nodes=nodes)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_bind_reads_the_pod_and_node_from_the_watches(fake, kube):
    fake.add_pod("p")
    async with watched(kube) as cached:
        outcome = await cached.bind(decision())
    assert (outcome.ok, fake.pod("default", "p")["spec"]["nodeName"]) == (True, "n1")
    assert fake.count("GET", "/pods/p") == 0 and fake.count("GET", "/nodes/n1") == 0
    assert [method for method, path, _ in fake.requests if "/pods/p" in path] == ["POST"]  # the Binding alone


async def test_a_pod_bound_since_the_watch_saw_it_keeps_its_decision(fake, kube):
    fake.add_pod("p")
    async with watched(kube, follow=False) as cached:
        bound = {"tidal.dev/decision-id": "d0", "tidal.dev/numa-cpus": '{"0":4}'}
        fake.update_pod("default", "p", lambda pod: (pod["spec"].update(nodeName="n2"),
                                                     pod["metadata"]["annotations"].update(bound)))
        outcome = await cached.bind(decision(decision_id="d1"))
    assert (outcome.ok, outcome.reason, outcome.bound_to) == (False, "pod default/p is already bound to node n2", "n2")
    # the decision is written with the Binding, which the API server refused: then the pod was read again
    assert fake.pod("default", "p")["metadata"]["annotations"] == bound and fake.bindings == []
    assert fake.count("POST", "/pods/p/binding") == 1 and fake.count("GET", "/pods/p") == 1


async def test_a_pod_changed_or_created_since_the_watch_saw_it_is_bound(fake, kube):
    fake.add_pod("p")
    async with watched(kube, follow=False) as cached:
        fake.update_pod("default", "p", _set("metadata.labels.tier", "web"))
        fake.add_pod("q")  # created after the watch stopped: not in the cache
        outcomes = [await cached.bind(decision()), await cached.bind(decision(name="q", decision_id="d2"))]
    assert [o.ok for o in outcomes] == [True, True] and fake.bindings == [("default", "p", "n1"), ("default", "q", "n1")]
    assert fake.pod("default", "p")["metadata"]["labels"]["tier"] == "web"
    assert fake.pod("default", "p")["metadata"]["annotations"]["tidal.dev/decision-id"] == "d1"
    assert fake.count("GET", "/pods/p") == 0 and fake.count("GET", "/pods/q") == 1  # q: not in the cache


async def test_a_node_cordoned_is_seen_in_the_watch(fake, kube):
    fake.add_pod("p")
    async with watched(kube) as cached:
        fake.update_node("n1", _set("spec.unschedulable", True))
        await wait_until(lambda: cached.nodes.get("", "n1")["spec"].get("unschedulable"), 10, "the cordon watched")
        outcome = await cached.bind(decision())
    assert (outcome.ok, outcome.reason) == (False, "node n1 is cordoned (spec.unschedulable)")
    assert fake.count("GET", "/nodes/n1") == 0 and fake.bindings == []


async def test_binding_a_pod_being_deleted_is_refused(fake, kube):
    """As the registry does: the binder's cache may not yet show the deletion."""
    pod = fake.add_pod("p")
    fake.update_pod("default", "p", _set("metadata.deletionTimestamp", "2026-01-01T00:00:00Z"))
    with pytest.raises(KubeStatusError) as refused:
        await kube.bind("default", "p", {"metadata": {"name": "p", "uid": pod["metadata"]["uid"]},
                                         "target": {"kind": "Node", "name": "n1"}})
    assert refused.value.code == 409 and "being deleted, cannot be assigned to a host" in refused.value.message


# -- node actions -----------------------------------------------------------------

def action(kind, node="n1", pod=None, key="tidal.dev/overloaded", **fields) -> NodeAction:
    return NodeAction(action_id="a1", node=node, kind=kind, pod=pod, taint_key=key if "taint" in kind else None,
                      reason="test", **fields)


OTHER = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}


async def test_taint_and_untaint_are_idempotent_and_keep_other_taints(fake, kube):
    fake.update_node("n1", lambda n: n["spec"].update(taints=[OTHER]))
    actuator = Actuator(kube)
    results = [await actuator.taint(action("taint")), await actuator.taint(action("taint"))]
    assert fake.node("n1")["spec"]["taints"] == [OTHER, {"key": "tidal.dev/overloaded", "effect": "NoSchedule"}]
    results += [await actuator.untaint(action("untaint")), await actuator.untaint(action("untaint"))]
    assert fake.node("n1")["spec"]["taints"] == [OTHER]
    assert [(r.status, r.reason) for r in results] == [
        ("done", "taint tidal.dev/overloaded:NoSchedule added"),
        ("done", "taint tidal.dev/overloaded:NoSchedule already present"),
        ("done", "taint tidal.dev/overloaded:NoSchedule removed"),
        ("done", "taint tidal.dev/overloaded:NoSchedule already absent"),
    ]
    assert fake.count("PATCH", "/nodes/n1") == 2  # nothing written when already as wanted


async def test_taint_rereads_the_node_when_it_changed_meanwhile(fake, kube):
    fake.fail("PATCH", "/nodes/n1", 409, times=2)
    outcome = await Actuator(kube).taint(action("taint", taint_effect="NoExecute"))
    assert outcome.status == "done" and fake.count("GET", "/nodes/n1") == 3
    assert fake.node("n1")["spec"]["taints"] == [{"key": "tidal.dev/overloaded", "effect": "NoExecute"}]
    fake.fail("PATCH", "/nodes/n1", 409, times=5)
    stuck = await Actuator(kube, conflict_attempts=3).untaint(action("untaint", taint_effect="NoExecute"))
    assert (stuck.status, stuck.reason) == ("failed", "node n1 kept changing: 3 conflicts")


async def test_a_concurrent_taint_is_not_overwritten(fake, kube):
    # The precondition is real: a patch from a stale read is refused by the server.
    stale = fake.node("n1")["metadata"]["resourceVersion"]
    fake.update_node("n1", lambda n: n["spec"].update(taints=[OTHER]))
    with pytest.raises(KubeStatusError) as caught:
        await kube.patch_node("n1", {"metadata": {"resourceVersion": stale}, "spec": {"taints": []}})
    assert caught.value.code == 409 and fake.node("n1")["spec"]["taints"] == [OTHER]


async def test_taint_of_a_missing_node_fails():
    async with FakeKubeApi() as empty:
        api = await Kube.connect(BridgeSettings(kube_api_url=empty.url))
        outcome = await Actuator(api).taint(action("taint", node="gone"))
        await api.close()
    assert (outcome.status, outcome.reason) == ("failed", "node gone is gone")


async def test_eviction_goes_through_the_eviction_api(fake, kube):
    fake.add_pod("web", node="n1", phase="Running")
    outcome = await Actuator(kube).evict(action("evict", pod="default/web"))
    assert (outcome.status, outcome.reason, outcome.retry) == ("done", "evicted default/web", False)
    assert fake.evictions == [("default", "web")] and fake.pod("default", "web") is None


async def test_a_disruption_budget_refusal_asks_for_a_retry_and_is_never_forced(fake, kube):
    fake.add_pod("web", node="n1", phase="Running")
    fake.block_eviction("default", "web", times=1)
    actuator = Actuator(kube)
    refused = await actuator.evict(action("evict", pod="default/web"))
    assert (refused.status, refused.retry) == ("refused", True)
    assert "disruption budget" in refused.reason and fake.pod("default", "web") is not None
    assert fake.count("DELETE", "/pods/web") == 0
    assert (await actuator.evict(action("evict", pod="default/web"))).status == "done"


@pytest.mark.parametrize("pod, status, reason", [
    ("default/ghost", "unknown-pod", "pod default/ghost is gone"),
    ("default/elsewhere", "unknown-pod", "pod default/elsewhere is on node n2, not n1"),
    ("default/pending", "unknown-pod", "pod default/pending is on node (none), not n1"),
    ("web", "failed", "pod 'web': expected namespace/name"),
])
async def test_evictions_that_cannot_apply(fake, kube, pod, status, reason):
    fake.add_pod("elsewhere", node="n2", phase="Running")
    fake.add_pod("pending")
    outcome = await Actuator(kube).evict(action("evict", pod=pod))
    assert (outcome.status, outcome.reason) == (status, reason)
    assert fake.evictions == []
