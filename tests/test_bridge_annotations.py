"""Pure parsing of pods: Kubernetes quantities, the `tidal.dev/` keys, and
a Pod object into `PodLifecycle` (fields, phase, requests, QoS, reasons)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import yaml

from conftest import ROOT
from tidal_bridge.annotations import parse_asks
from tidal_bridge.pods import kube_qos_class, pod_lifecycle, pod_phase, pod_requests
from tidal_bridge.quantity import QuantityError, count, cpu_milli, memory_mib


@pytest.mark.parametrize("text, milli", [
    ("500m", 500), ("2", 2000), ("0.5", 500), ("1.5", 1500), (3, 3000),
    ("100u", 1),        # 0.0001 CPU rounds up to 1m
    ("1e3", 1_000_000),  # 1000 CPUs
    ("250000n", 1),     # 0.00025 CPU -> 0.25m -> 1m
])
def test_cpu_quantities(text, milli):
    assert cpu_milli(text) == milli


@pytest.mark.parametrize("text, mib", [
    ("1Gi", 1024), ("512Mi", 512), ("1.5Gi", 1536),
    ("1G", 954),            # 1e9 / 2^20 = 953.67 -> 954
    ("1000Ki", 1),          # 1000 / 1024 = 0.98 -> 1
    ("128974848", 123),     # exactly 123 Mi
    ("129e6", 124),         # 129e6 / 2^20 = 123.02 -> 124
    ("1Ti", 1024 * 1024),
])
def test_memory_quantities(text, mib):
    assert memory_mib(text) == mib


@pytest.mark.parametrize("text", ["abc", "1.2.3", "-1", "1Xi", "", "Gi", "1 Gi", True])
def test_bad_quantities_raise(text):
    with pytest.raises(QuantityError):
        cpu_milli(text)


def test_gpu_count_rounds_up():
    assert (count("2"), count("1500m")) == (2, 2)


SAMPLE = {"tidal.dev/exclusive-cpus": "true", "tidal.dev/cpu-policy": "single-numa", "tidal.dev/gpu-count": "1",
          "tidal.dev/gpu-milli": "500", "tidal.dev/gpu-models": "A100|V100"}


def test_asks_of_the_documented_keys():
    asks = parse_asks({**SAMPLE, "tidal.dev/gpu-kind": "virtual", "tidal.dev/gpu-group": "g1"},
                      {"tidal.dev/tenant": "team-a", "tidal.dev/user": "alice", "tidal.dev/qos": "ls",
                       "tidal.dev/evictable": "TRUE", "app": "web"})
    assert asks.problems == ()
    assert (asks.exclusive_cpus, asks.cpu_policy, asks.gpu_count, asks.gpu_milli, asks.gpu_models) == \
        (True, "single-numa", 1, 500, ("A100", "V100"))
    assert (asks.gpu_kind, asks.gpu_group, asks.tenant, asks.user, asks.qos, asks.evictable) == \
        ("virtual", "g1", "team-a", "alice", "LS", True)


@pytest.mark.parametrize("annotations, labels, problem", [
    ({"tidal.dev/gpu-milli": "1500"}, {}, 'annotation tidal.dev/gpu-milli: "1500" is not in 1..1000'),
    ({"tidal.dev/gpu-milli": "0"}, {}, 'annotation tidal.dev/gpu-milli: "0" is not in 1..1000'),
    ({"tidal.dev/gpu-milli": "half"}, {}, 'annotation tidal.dev/gpu-milli: "half" is not a whole number in 1..1000'),
    ({"tidal.dev/gpu-count": "-1"}, {}, 'annotation tidal.dev/gpu-count: "-1" is not a whole number in 0..1024'),
    ({"tidal.dev/exclusive-cpus": "yes"}, {}, 'annotation tidal.dev/exclusive-cpus: "yes" is not true or false'),
    ({"tidal.dev/cpu-policy": "packed"}, {},
     'annotation tidal.dev/cpu-policy: "packed" is not one of spread, single-numa, auto'),
    ({"tidal.dev/gpu-models": "A100||V100"}, {},
     'annotation tidal.dev/gpu-models: "A100||V100" has an empty model name (separate models with a single |)'),
    ({"tidal.dev/gpu-kind": "mig"}, {}, 'annotation tidal.dev/gpu-kind: "mig" is not one of physical, virtual'),
    ({"tidal.dev/gpu-group": " "}, {}, 'annotation tidal.dev/gpu-group: " " must be a name of 1..253 characters'),
    ({}, {"tidal.dev/qos": "gold"}, 'label tidal.dev/qos: "gold" is not one of LS, BE'),
    ({}, {"tidal.dev/evictable": "1"}, 'label tidal.dev/evictable: "1" is not true or false'),
    ({"tidal.dev/qos": "LS"}, {}, "annotation tidal.dev/qos: is read from labels, not annotations"),
    ({}, {"tidal.dev/gpu-count": "1"}, "label tidal.dev/gpu-count: is read from annotations, not labels"),
    ({"tidal.dev/gpu-cont": "1"}, {}, "annotation tidal.dev/gpu-cont: unknown Tidal annotation (known: "
     "exclusive-cpus, cpu-policy, gpu-count, gpu-milli, gpu-models, gpu-kind, gpu-group)"),
])
def test_malformed_keys_give_one_precise_problem(annotations, labels, problem):
    assert parse_asks(annotations, labels).problems == (problem,)


def test_written_keys_other_prefixes_and_unknown_labels_are_ignored():
    asks = parse_asks({"tidal.dev/decision-id": "d1", "tidal.dev/numa-cpus": "{}", "tidal.dev/gpus": "[]",
                       "example.com/gpu-milli": "5000"}, {"tidal.dev/team": "x"})
    assert asks == parse_asks({}, {})


def test_every_problem_is_reported_and_valid_keys_still_parse():
    asks = parse_asks({"tidal.dev/gpu-milli": "2000", "tidal.dev/gpu-count": "x", "tidal.dev/cpu-policy": "spread"}, {})
    assert len(asks.problems) == 2 and asks.cpu_policy == "spread"


# -- Pod objects -> PodLifecycle ------------------------------------------------------

T0 = "2026-03-01T10:00:00Z"


def container(name="app", cpu="1", memory="1Gi", limits=None, **extra):
    resources = {"requests": {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}}
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def make_pod(name="p", namespace="ns1", *, annotations=None, labels=None, containers=None, node=None,
             phase="Pending", qos=None, **spec):
    status = {"phase": phase}
    if qos:
        status["qosClass"] = qos
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "7",
                         "creationTimestamp": T0, "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"schedulerName": "tidal", "containers": containers or [container()],
                     **({"nodeName": node} if node else {}), **spec},
            "status": status}


def test_the_sample_pod_of_the_manifests():
    sample = yaml.safe_load((ROOT / "k8s/examples/sample-pod.yaml").read_text())
    sample["metadata"].update(namespace="default", uid="u1", creationTimestamp=T0)
    pod = pod_lifecycle(sample)
    assert pod.invalid_reason is None
    assert (pod.namespace, pod.name, pod.phase, pod.node) == ("default", "tidal-sample", "pending", None)
    assert (pod.requests.cpu_milli, pod.requests.memory_mib) == (4000, 8192)  # "4" CPUs, 8Gi
    assert (pod.exclusive_cpus, pod.cpu_policy) == (True, "single-numa")
    assert (pod.gpu.count, pod.gpu.milli, pod.gpu.models, pod.gpu.total_milli) == (1, 500, ["A100", "V100"], 500)
    assert (pod.tenant, pod.user, pod.qos) == ("team-a", "alice", "LS")
    assert pod.created_at == datetime(2026, 3, 1, 10, tzinfo=timezone.utc)


@pytest.mark.parametrize("node, phase, deleted, expected", [
    (None, "Pending", False, "pending"),
    ("n1", "Pending", False, "bound"),
    ("n1", "Running", False, "running"),
    ("n1", "Succeeded", False, "deleted"),
    ("n1", "Failed", False, "deleted"),
    (None, "Pending", True, "deleted"),
    ("n1", "Running", True, "deleted"),
    ("n1", "Unknown", False, "bound"),
])
def test_phases(node, phase, deleted, expected):
    obj = make_pod(node=node, phase=phase)
    assert pod_phase(obj, deleted) == expected
    assert pod_lifecycle(obj, deleted=deleted).phase == expected


def test_requests_follow_the_api_servers_formula():
    spec = {"containers": [container(cpu="500m", memory="256Mi"), container("b", cpu="250m", memory="256Mi")],
            "initContainers": [container("sidecar", cpu="100m", memory="64Mi", restartPolicy="Always"),
                               container("setup", cpu="2", memory="128Mi")],
            "overhead": {"cpu": "50m", "memory": "10Mi"}}
    resources, gpus, problems = pod_requests(spec)
    # cpu: main 750 + sidecar 100 = 850; init peak = 100 + 2000 = 2100; max + 50 overhead = 2150
    # mem: main 512 + sidecar 64 = 576; init peak = 64 + 128 = 192; max + 10 = 586
    assert (resources.cpu_milli, resources.memory_mib, gpus, problems) == (2150, 586, 0, [])


def test_limits_stand_in_for_missing_requests_and_gpus_come_from_limits():
    spec = {"containers": [{"name": "app", "resources": {"limits": {"cpu": "2", "memory": "1Gi",
                                                                     "nvidia.com/gpu": "2"}}}]}
    resources, gpus, _ = pod_requests(spec)
    assert (resources.cpu_milli, resources.memory_mib, gpus) == (2000, 1024, 2)
    pod = pod_lifecycle(make_pod(containers=spec["containers"]))
    assert (pod.gpu.count, pod.gpu.milli, pod.invalid_reason) == (2, 1000, None)


@pytest.mark.parametrize("containers, qos_class", [
    ([container(limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
    ([container(cpu="1000m", limits={"cpu": "1", "memory": "1024Mi"})], "Guaranteed"),  # equal quantities
    ([container()], "Burstable"),
    ([container(limits={"cpu": "2", "memory": "1Gi"})], "Burstable"),
    ([container(cpu=None, memory=None)], "BestEffort"),
])
def test_qos_class_is_computed_when_the_status_lacks_it(containers, qos_class):
    assert kube_qos_class(make_pod(containers=containers)) == qos_class


@pytest.mark.parametrize("qos_class, labels, expected", [
    ("Guaranteed", {}, "LS"), ("Burstable", {}, "BE"), ("BestEffort", {}, "BE"),
    ("Burstable", {"tidal.dev/qos": "LS"}, "LS"), ("Guaranteed", {"tidal.dev/qos": "BE"}, "BE"),
])
def test_qos_label_overrides_the_kubernetes_class(qos_class, labels, expected):
    assert pod_lifecycle(make_pod(qos=qos_class, labels=labels)).qos == expected


def test_identity_priority_and_defaults():
    pod = pod_lifecycle(make_pod(labels={"tidal.dev/evictable": "true", "app": "web"}, priority=1000,
                                 priorityClassName="system-node-critical"))
    assert (pod.tenant, pod.user) == ("ns1", "default")  # tenant defaults to the namespace
    assert (pod.priority, pod.system_critical, pod.evictable) == (1000, True, True)
    assert pod.labels == {"tidal.dev/evictable": "true", "app": "web"} and pod.uid == "uid-p"
    assert not pod_lifecycle(make_pod(priorityClassName="high")).system_critical


@pytest.mark.parametrize("annotations, containers, reason", [
    ({"tidal.dev/gpu-milli": "1500"}, None, 'annotation tidal.dev/gpu-milli: "1500" is not in 1..1000'),
    ({"tidal.dev/exclusive-cpus": "true"}, [container(cpu="1500m")],
     'annotation tidal.dev/exclusive-cpus: "true" needs whole, non-zero CPU requests, got 1500m'),
    ({"tidal.dev/gpu-milli": "500", "tidal.dev/gpu-count": "2"}, None,
     'annotation tidal.dev/gpu-milli: "500" is a share of one GPU, but tidal.dev/gpu-count is 2 (must be 1)'),
    ({"tidal.dev/gpu-count": "1"}, [container(limits={"nvidia.com/gpu": "2"})],
     'annotation tidal.dev/gpu-count: "1" disagrees with the pod\'s nvidia.com/gpu limits (2)'),
    ({}, [container(cpu="lots")], "container app: resources.requests.cpu 'lots' is not a Kubernetes quantity"),
])
def test_malformed_pods_are_published_unschedulable_with_the_reason(annotations, containers, reason):
    pod = pod_lifecycle(make_pod(annotations=annotations, containers=containers))
    assert pod.invalid_reason == reason
    assert pod.phase == "pending"
    assert pod.exclusive_cpus is False and pod.gpu.count in (0, 2)


def test_several_problems_are_joined():
    pod = pod_lifecycle(make_pod(annotations={"tidal.dev/gpu-milli": "0", "tidal.dev/cpu-policy": "x"}))
    assert pod.invalid_reason == ('annotation tidal.dev/cpu-policy: "x" is not one of spread, single-numa, auto; '
                                  'annotation tidal.dev/gpu-milli: "0" is not in 1..1000')


def test_gpu_milli_alone_means_one_shared_gpu():
    pod = pod_lifecycle(make_pod(annotations={"tidal.dev/gpu-milli": "250"}))
    assert (pod.gpu.count, pod.gpu.milli, pod.requests.cpu_milli) == (1, 250, 1000)


def test_garbage_never_raises():
    pod = pod_lifecycle({"metadata": {"name": "x"}, "spec": {"containers": [{"resources": {"requests": {"cpu": []}}}],
                                                             "priority": "high"}})
    assert pod.phase == "pending" and pod.invalid_reason and pod.priority == 0


def test_a_time_without_its_zone_is_read_as_kubernetes_reads_it_not_at_all():
    pod = make_pod(phase="Running", node="n1")
    pod["metadata"]["creationTimestamp"], pod["status"]["startTime"] = "2026-11-27T12:28:21", "2026-11-27T12:28:22"
    event = pod_lifecycle(pod)  # an event's times have their zone (a zoneless one is refused), so none is made up
    assert (event.created_at, event.started_at) == (datetime(1970, 1, 1, tzinfo=timezone.utc), None)
