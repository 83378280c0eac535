"""Pure node handling and request bodies: node-level facts, idempotent
taint lists, and what the bridge writes to pods, nodes and events."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tidal_bridge.nodes import node_status, node_topology, with_taint, without_taint
from tidal_bridge.objects import binding_body, eviction_body, pod_event, taints_patch
from tidal_schemas import NodeStatus, Resources


def make_node(name="n1", capacity=None, allocatable=None, labels=None):
    capacity = capacity or {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "u-" + name, "resourceVersion": "3", "labels": labels or {}},
            "status": {"capacity": capacity, "allocatable": allocatable or capacity}}


def test_node_level_facts_from_capacity_and_allocatable():
    node = make_node(capacity={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
                     allocatable={"cpu": "15500m", "memory": "63Gi", "nvidia.com/gpu": "4"},
                     labels={"zone": "a"})
    topology, problem = node_topology(node)
    assert problem == ""
    assert topology.capacity == Resources(cpu_milli=16000, memory_mib=65536, gpu_milli=4000)
    assert topology.allocatable == Resources(cpu_milli=15500, memory_mib=64512, gpu_milli=4000)
    assert topology.labels == {"zone": "a"}
    assert (topology.numa_nodes, topology.cpus, topology.gpus, topology.exclusive_cpus) == ([], [], [], False)


def test_allocatable_is_clamped_to_capacity_and_missing_allocatable_is_capacity():
    over, _ = node_topology(make_node(capacity={"cpu": "4", "memory": "1Gi"},
                                      allocatable={"cpu": "5", "memory": "1Gi"}))
    assert over.allocatable.cpu_milli == 4000
    node = make_node()
    del node["status"]["allocatable"]
    same, _ = node_topology(node)
    assert same.allocatable == same.capacity


def test_a_malformed_node_figure_is_a_reason_not_a_crash():
    topology, problem = node_topology(make_node(capacity={"cpu": "eight", "memory": "1Gi"}))
    assert topology is None and problem == "node n1: 'eight' is not a Kubernetes quantity"


def test_a_custom_gpu_resource_name():
    topology, _ = node_topology(make_node(capacity={"cpu": "1", "memory": "1Gi", "amd.com/gpu": "2"}), "amd.com/gpu")
    assert topology.capacity.gpu_milli == 2000


OTHER = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
OURS = {"key": "tidal.dev/overloaded", "effect": "NoSchedule"}


@pytest.mark.parametrize("taints, expected", [
    ([], [OURS]),
    (None, [OURS]),
    ([OTHER], [OTHER, OURS]),
    ([OTHER, OURS], None),                                          # already there: no write
    ([{"key": "tidal.dev/overloaded", "effect": "NoExecute"}],      # same key, other effect: a different taint
     [{"key": "tidal.dev/overloaded", "effect": "NoExecute"}, OURS]),
])
def test_with_taint(taints, expected):
    assert with_taint(taints, "tidal.dev/overloaded", "NoSchedule") == expected


@pytest.mark.parametrize("taints, expected", [
    ([OTHER, OURS], [OTHER]),
    ([OURS], []),
    ([OTHER], None),                                                 # absent: no write
    (None, None),
    ([{"key": "tidal.dev/overloaded", "effect": "NoExecute"}], None),
])
def test_without_taint(taints, expected):
    assert without_taint(taints, "tidal.dev/overloaded", "NoSchedule") == expected


@pytest.mark.parametrize("capacity, allocatable, expected", [
    # the kubelet's own: capacity less its reservations
    ({"cpu": "8", "memory": "32Gi"}, {"cpu": "7910m", "memory": "31Gi", "nvidia.com/gpu": "4"},
     Resources(cpu_milli=7910, memory_mib=31744)),
    # the webhook's oversold figure, above capacity: kept as it is, it is what the kubelet admits against
    ({"cpu": "8", "memory": "32Gi"}, {"cpu": "12", "memory": "40Gi"}, Resources(cpu_milli=12000, memory_mib=40960)),
    # no allocatable: the API server's default, capacity
    ({"cpu": "8", "memory": "32Gi"}, None, Resources(cpu_milli=8000, memory_mib=32768)),
])
def test_node_status_is_what_the_kubelet_admits_against(capacity, allocatable, expected):
    node = make_node(capacity=capacity)
    node["status"]["allocatable"] = allocatable
    assert node_status(node) == (NodeStatus(node="n1", allocatable=expected), "")


def test_a_node_without_figures_or_with_a_malformed_one_has_no_status():
    assert node_status({"metadata": {"name": "n1"}}) == (None, "")  # not reported yet: nothing to say
    status, problem = node_status(make_node(allocatable={"cpu": "lots", "memory": "1Gi"}))
    assert status is None and problem.startswith("node n1: status.allocatable: 'lots' is not a Kubernetes quantity")


def test_bodies_carry_preconditions():
    assert taints_patch([OURS], "12") == {"metadata": {"resourceVersion": "12"}, "spec": {"taints": [OURS]}}
    binding = binding_body("ns", "p", "n1", "uid-1")
    assert binding["metadata"] == {"name": "p", "namespace": "ns", "uid": "uid-1"}
    assert binding["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    eviction = eviction_body("ns", "p", "uid-1")
    assert (eviction["apiVersion"], eviction["kind"]) == ("policy/v1", "Eviction")
    assert eviction["deleteOptions"] == {"preconditions": {"uid": "uid-1"}}
    assert "deleteOptions" not in eviction_body("ns", "p")


def test_pod_events_are_named_by_what_they_report():
    pod = {"metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "4"}}
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    first = pod_event(pod, reason="TidalInvalidAnnotation", message="bad", now=now)
    again = pod_event(pod, reason="TidalInvalidAnnotation", message="bad", now=now.replace(hour=5))
    other = pod_event(pod, reason="TidalInvalidAnnotation", message="worse", now=now)
    assert first["metadata"]["name"] == again["metadata"]["name"] != other["metadata"]["name"]
    assert first["metadata"]["name"].startswith("web.")
    assert first["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "ns",
                                       "uid": "u1", "resourceVersion": "4"}
    assert (first["type"], first["reason"], first["firstTimestamp"]) == ("Warning", "TidalInvalidAnnotation",
                                                                         "2026-01-01T00:00:00Z")
