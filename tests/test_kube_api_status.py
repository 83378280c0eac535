"""The simulated API server's pods/status and events with the API server's
semantics, as kube-scheduler (and the bridge) use them: a strategic merge
patch merges `status.conditions` by type (a JSON merge patch replaces the
list), a binding turns `PodScheduled` True, events are read, counted by
patch and listed by field selector — through kubernetes-asyncio."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from tidal_simulator.kube_api import KubeApiServer
from tidal_simulator.kube_api.strategic import set_condition, strategic_merge_patch

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
READY = {"type": "Ready", "status": "True"}


@pytest.mark.parametrize("target, patch, expected", [
    # conditions merge by type: the one named changes, the others stay, fields not named stay
    ({"status": {"conditions": [READY, {"type": "PodScheduled", "status": "False", "lastTransitionTime": "t0"}]}},
     {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "message": "m"}]}},
     {"status": {"conditions": [READY, {"type": "PodScheduled", "status": "False", "lastTransitionTime": "t0",
                                        "message": "m"}]}}),
    # a new type is appended
    ({"status": {"conditions": [READY]}}, {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}},
     {"status": {"conditions": [READY, {"type": "PodScheduled", "status": "True"}]}}),
    # $patch: delete removes the element with that key; $setElementOrder is only a hint
    ({"status": {"conditions": [READY, {"type": "X", "status": "True"}]}},
     {"status": {"$setElementOrder/conditions": [{"type": "Ready"}],
                 "conditions": [{"type": "X", "$patch": "delete"}]}},
     {"status": {"conditions": [READY]}}),
    # $patch: replace on a list element: the list as given
    ({"status": {"conditions": [READY, {"type": "X", "status": "True"}]}},
     {"status": {"conditions": [{"$patch": "replace"}, {"type": "Y", "status": "False"}]}},
     {"status": {"conditions": [{"type": "Y", "status": "False"}]}}),
    # a list without a merge key is replaced; null removes
    ({"spec": {"tolerations": [{"key": "a"}], "x": 1}}, {"spec": {"tolerations": [{"key": "b"}], "x": None}},
     {"spec": {"tolerations": [{"key": "b"}]}}),
    # containers merge by name
    ({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}},
     {"spec": {"containers": [{"name": "b", "image": "2"}]}},
     {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}),
])
def test_strategic_merge_patch(target, patch, expected):
    assert strategic_merge_patch(target, patch, "pods") == expected


def test_set_condition_moves_the_transition_time_only_when_the_status_changes():
    status = {"conditions": [READY]}
    assert set_condition(status, {"type": "PodScheduled", "status": "False", "message": "a"}, "t1")
    assert set_condition(status, {"type": "PodScheduled", "status": "False", "message": "b"}, "t2")
    assert status["conditions"][1] == {"type": "PodScheduled", "status": "False", "message": "b",
                                       "lastTransitionTime": "t1"}
    assert not set_condition(status, {"type": "PodScheduled", "status": "False", "message": "b"}, "t3")
    assert set_condition(status, {"type": "PodScheduled", "status": "True"}, "t4")
    assert status["conditions"] == [READY, {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t4"}]


@pytest.fixture
async def api():
    async with KubeApiServer() as server:
        server.add_node("n1")
        async with client.ApiClient(client.Configuration(host=server.url)) as api_client:
            yield server, client.CoreV1Api(api_client)


def conditions(server: KubeApiServer, name: str = "p") -> dict[str, dict]:
    return {c["type"]: c for c in server.pod("default", name)["status"].get("conditions", [])}


async def test_pods_status_conditions_merge_by_type_and_a_binding_schedules_the_pod(api):
    server, core = api
    server.add_pod("p")
    server.update_pod("default", "p", lambda p: p["status"].update(conditions=[dict(READY)]))
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}
    await core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [unschedulable]}},
                                           _content_type=STRATEGIC)
    assert conditions(server) == {"Ready": READY, "PodScheduled": unschedulable}
    # a merge patch replaces the list whole, as the API server does
    rv = server.pod("default", "p")["metadata"]["resourceVersion"]
    await core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [unschedulable]}},
                                           _content_type=MERGE)
    assert conditions(server) == {"PodScheduled": unschedulable}
    assert server.pod("default", "p")["metadata"]["resourceVersion"] != rv
    await core.create_namespaced_pod_binding("p", "default", client.V1Binding(
        metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="n1")),
        _preload_content=False)
    scheduled = conditions(server)["PodScheduled"]
    assert scheduled["status"] == "True" and "reason" not in scheduled and "message" not in scheduled
    assert scheduled["lastTransitionTime"] != unschedulable["lastTransitionTime"]
    assert len(server.pod("default", "p")["status"]["conditions"]) == 1  # replaced, not appended


def event(name: str, pod: str, uid: str, message: str = "m") -> dict:
    return {"metadata": {"name": name}, "involvedObject": {"kind": "Pod", "name": pod, "namespace": "default",
                                                            "uid": uid},
            "reason": "FailedScheduling", "message": message, "type": "Warning", "count": 1,
            "source": {"component": "tidal-bridge"}}


async def test_events_are_read_counted_by_patch_and_listed_by_field_selector(api):
    server, core = api
    await core.create_namespaced_event("default", event("p.1", "p", "u1"), _preload_content=False)
    await core.create_namespaced_event("default", event("q.1", "q", "u2"), _preload_content=False)
    created = server.events[("default", "p.1")]
    patched = await core.patch_namespaced_event("p.1", "default", {"count": 2, "lastTimestamp": "2026-01-01T00:00:09Z",
                                                                   "metadata": {"name": "renamed"}},
                                                _content_type=STRATEGIC)
    assert (patched.count, patched.metadata.name, patched.message) == (2, "p.1", "m")
    assert int(patched.metadata.resource_version) > int(created["metadata"]["resourceVersion"])
    assert (await core.read_namespaced_event("p.1", "default")).count == 2
    # kubectl describe pod: the pod's events by involvedObject
    listed = await core.list_namespaced_event(
        "default", field_selector="involvedObject.name=p,involvedObject.namespace=default,involvedObject.uid=u1")
    assert [e.metadata.name for e in listed.items] == ["p.1"]
    listed = await core.list_event_for_all_namespaces(field_selector="reason=FailedScheduling,involvedObject.name!=p")
    assert [e.metadata.name for e in listed.items] == ["q.1"]
    for call in (core.read_namespaced_event("nope", "default"),
                 core.patch_namespaced_event("nope", "default", {"count": 3}, _content_type=STRATEGIC),
                 core.list_namespaced_event("default", field_selector="spec.nodeName=n1")):
        with pytest.raises(client.ApiException) as raised:
            await call
        assert raised.value.status in (400, 404)
