"""Pods asking GPUs with the `tidal.dev/gpu-milli` resource (the node agent's
device plugin), the older form (`nvidia.com/gpu` limits and annotations),
both at once, and the resource named in a pending pod's message."""

from __future__ import annotations

import pytest

from tidal_bridge.gpu_ask import asked_resource, gpus_of_milli
from tidal_bridge.pods import pod_lifecycle
from tidal_bridge.unschedulable import decision_message
from tidal_schemas import PlacementDecision

R = "tidal.dev/gpu-milli"


def box(name="app", requests=None, limits=None, **extra):
    """A container asking 1 CPU, 1Gi and what `requests` / `limits` add."""
    resources = {"requests": {"cpu": "1", "memory": "1Gi", **(requests or {})}}
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


def pod(*containers, annotations=None, init=None):
    spec = {"schedulerName": "tidal", "containers": list(containers) or [box()]}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations or {}},
            "spec": spec, "status": {"phase": "Pending"}}


def ask(p) -> tuple[int, int, str | None]:
    event = pod_lifecycle(p)
    return event.gpu.count, event.gpu.milli, event.invalid_reason


@pytest.mark.parametrize("q, expected", [
    (0, (0, 1000)), (1, (1, 1)), (250, (1, 250)), (1000, (1, 1000)),
    (2000, (2, 1000)), (8000, (8, 1000)),
    (1500, "resources tidal.dev/gpu-milli: 1500 is neither a share of one GPU (1..1000) nor whole GPUs "
           "(a multiple of 1000)"),
    (1001, "resources tidal.dev/gpu-milli: 1001 is neither a share of one GPU (1..1000) nor whole GPUs "
           "(a multiple of 1000)"),
])
def test_the_quantity_asks_one_share_or_whole_gpus(q, expected):
    assert gpus_of_milli(q) == expected


@pytest.mark.parametrize("containers, init, expected", [
    # limits alone (requests default to them), requests and limits equal
    ([box(limits={R: "500"})], None, (1, 500, None)),
    ([box(requests={R: "300"}, limits={R: "300"})], None, (1, 300, None)),
    ([box(requests={R: "1000"}, limits={R: "1k"})], None, (1, 1000, None)),  # equal quantities
    ([box(limits={R: "4000"})], None, (4, 1000, None)),
    # Σ over containers: 400 + 400 = 800, one GPU's share
    ([box(limits={R: "400"}), box("b", limits={R: "400"})], None, (1, 800, None)),
    # an init container runs before: max(main 500, init 2000) = 2000, two whole GPUs
    ([box(limits={R: "500"})], [box("setup", limits={R: "2000"})], (2, 1000, None)),
    # a sidecar (restartPolicy Always) runs beside: 500 + 500 = 1000
    ([box(limits={R: "500"})], [box("side", limits={R: "500"}, restartPolicy="Always")], (1, 1000, None)),
    # invalid: neither a share nor whole GPUs (600 + 600 = 1200)
    ([box(limits={R: "600"}), box("b", limits={R: "600"})], None,
     (0, 1000, "resources tidal.dev/gpu-milli: 1200 is neither a share of one GPU (1..1000) nor whole GPUs "
               "(a multiple of 1000)")),
    ([box(requests={R: "500"}, limits={R: "1000"})], None,
     (1, 500, "container app: resources.requests.tidal.dev/gpu-milli '500' must equal its limits '1000' "
              "(an extended resource)")),
    ([box(limits={R: "half"})], None,
     (0, 1000, "container app: resources.limits.tidal.dev/gpu-milli 'half' is not a Kubernetes quantity")),
])
def test_the_resource_alone(containers, init, expected):
    assert ask(pod(*containers, init=init)) == expected


@pytest.mark.parametrize("containers, annotations, expected", [
    # the older form alone is read as before
    ([box(limits={"nvidia.com/gpu": "2"})], None, (2, 1000, None)),
    ([box()], {"tidal.dev/gpu-milli": "250"}, (1, 250, None)),
    # both forms, agreeing
    ([box(limits={R: "250"})], {"tidal.dev/gpu-milli": "250"}, (1, 250, None)),
    ([box(limits={R: "2000", "nvidia.com/gpu": "2"})], None, (2, 1000, None)),
    ([box(limits={R: "1000"})], {"tidal.dev/gpu-count": "1"}, (1, 1000, None)),
    # annotations that are not the older form's count or share go with the resource
    ([box(limits={R: "500"})], {"tidal.dev/gpu-models": "A100"}, (1, 500, None)),
    # both forms, disagreeing
    ([box(limits={R: "500"})], {"tidal.dev/gpu-milli": "250"},
     (0, 1000, "resources tidal.dev/gpu-milli: 500 asks 500 milli of one GPU, but the older form "
               "(nvidia.com/gpu limits, tidal.dev/gpu-count, tidal.dev/gpu-milli annotations) asks 250 milli of one GPU")),
    ([box(limits={R: "2000", "nvidia.com/gpu": "1"})], None,
     (0, 1000, "resources tidal.dev/gpu-milli: 2000 asks 2 whole GPUs, but the older form "
               "(nvidia.com/gpu limits, tidal.dev/gpu-count, tidal.dev/gpu-milli annotations) asks 1 whole GPU")),
    ([box(limits={R: "1000"})], {"tidal.dev/gpu-count": "0"},
     (0, 1000, "resources tidal.dev/gpu-milli: 1000 asks 1 whole GPU, but the older form "
               "(nvidia.com/gpu limits, tidal.dev/gpu-count, tidal.dev/gpu-milli annotations) asks no GPU")),
    # the older form contradicting itself is reported as before, whatever the resource says
    ([box(limits={R: "1000", "nvidia.com/gpu": "2"})], {"tidal.dev/gpu-count": "1"},
     (0, 1000, "annotation tidal.dev/gpu-count: \"1\" disagrees with the pod's nvidia.com/gpu limits (2)")),
])
def test_both_forms_must_agree(containers, annotations, expected):
    assert ask(pod(*containers, annotations=annotations)) == expected


def test_the_resource_of_a_models_choice_is_kept():
    event = pod_lifecycle(pod(box(limits={R: "3000"}), annotations={"tidal.dev/gpu-models": "A100|H100"}))
    assert (event.gpu.count, event.gpu.milli, event.gpu.models, event.invalid_reason) == (3, 1000,
                                                                                          ["A100", "H100"], None)


def test_a_pending_pods_message_names_the_resource_it_asked():
    asking = pod(box(limits={R: "500"}))
    older = pod(box(limits={"nvidia.com/gpu": "1"}))
    assert (asked_resource(asking, "nvidia.com/gpu"), asked_resource(older, "nvidia.com/gpu")) == (
        R, "nvidia.com/gpu")
    assert asked_resource(pod(box(), init=[box("setup", requests={R: "1000"})]), "amd.com/gpu") == R
    assert asked_resource(None, "nvidia.com/gpu") == "nvidia.com/gpu"  # a pod gone: the cluster's
    pending = PlacementDecision(decision_id="d", namespace="ns", name="p", outcome="pending", reason="0/2 nodes fit",
                                filtered={"gpu": 2}, nodes=2)
    assert decision_message(pending, asked_resource(asking, "nvidia.com/gpu")) == (
        "0/2 nodes are available: 2 Insufficient tidal.dev/gpu-milli.")
