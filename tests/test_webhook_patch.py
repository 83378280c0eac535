"""The webhook's pure parts: quantities as the API server writes them, the
kubelet's own figure, the clamped patch, who gets patched, and the review
format — table-driven, the arithmetic in the comments."""

from __future__ import annotations

import base64
import json
from fractions import Fraction

import pytest

from tidal_kube.quantity import QuantityError, format_binary, format_decimal, mebibytes, milli, parse
from tidal_schemas import Resources
from tidal_simulator.kube_api.json_patch import apply_json_patch
from tidal_webhook.answer import answer
from tidal_webhook.patch import KUBELET_ANNOTATION, WRITTEN_ANNOTATION, kubelet_figures, oversold_patch
from tidal_webhook.review import ReviewError, read_review, response
from webhook_parts import kubelet_node, status_review


@pytest.mark.parametrize("text, value", [
    ("8", 8), ("7910m", Fraction(791, 100)), ("1.5", Fraction(3, 2)), ("32Gi", 32 << 30), ("32766436Ki", 32766436 << 10),
    ("1G", 10 ** 9), ("1e3", 1000), ("100n", Fraction(1, 10 ** 7)), ("1E", 10 ** 18), ("+2", 2),
])
def test_parse(text, value):
    assert parse(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1.2.3", "1Ki2", "abc", "1ZB", "9" * 70, True, None, 1.5])
def test_parse_refuses(text):
    with pytest.raises(QuantityError):
        parse(text)


@pytest.mark.parametrize("value, text", [
    (Fraction(3, 2), "1500m"), (8, "8"), (12, "12"), (8000, "8k"), (0, "0"), (Fraction(1, 1000), "1m"),
    (Fraction(1, 10 ** 10), "1n"),  # finer than nano: rounded up
])
def test_format_decimal_is_canonical(value, text):
    assert format_decimal(value) == text


@pytest.mark.parametrize("value, text", [
    (16 << 30, "16Gi"), (1536 << 20, "1536Mi"), (40 << 30, "40Gi"), (1000, "1000"), (1024, "1Ki"), (0, "0"),
    (Fraction(3, 2), "2"),  # bytes rounded up
])
def test_format_binary_is_canonical(value, text):
    assert format_binary(value) == text


def test_units():
    assert milli("7910m") == 7910 and mebibytes("1536Ki") == Fraction(3, 2)


def _with(node: dict, allocatable: dict | None = None, annotations: dict | None = None) -> dict:
    node = json.loads(json.dumps(node))
    node["status"]["allocatable"].update(allocatable or {})
    if annotations is not None:
        node["metadata"]["annotations"] = annotations
    return node


OURS = {KUBELET_ANNOTATION: '{"cpu":"8","memory":"32Gi"}', WRITTEN_ANNOTATION: '{"cpu":"12","memory":"40Gi"}'}


@pytest.mark.parametrize("obj, old, expected", [
    # a plain kubelet update: its figure
    (_with(kubelet_node()), _with(kubelet_node()), {"cpu": "8", "memory": "32Gi"}),
    # the stored figure is ours and the update left it: the recorded kubelet figure
    (_with(kubelet_node(), {"cpu": "12", "memory": "40Gi"}, OURS),
     _with(kubelet_node(), {"cpu": "12", "memory": "40Gi"}, OURS), {"cpu": "8", "memory": "32Gi"}),
    # the kubelet wrote its (new) figure over ours: the new one
    (_with(kubelet_node(), {"cpu": "7", "memory": "32Gi"}, OURS),
     _with(kubelet_node(), {"cpu": "12", "memory": "40Gi"}, OURS), {"cpu": "7", "memory": "32Gi"}),
    # the annotation is stale (the stored figure is not what we wrote: the webhook was down): the request's
    (_with(kubelet_node(), {"cpu": "9"}, OURS), _with(kubelet_node(), {"cpu": "9"}, OURS),
     {"cpu": "9", "memory": "32Gi"}),
])
def test_kubelet_figures(obj, old, expected):
    assert kubelet_figures(obj, old) == expected


def _paths(patch) -> dict:
    return {op["path"]: op.get("value") for op in patch.ops}


def test_oversold_figures_are_clamped_to_the_cap():
    # granted 14 CPUs, 40 GiB; the kubelet's 8 CPUs, 32 GiB; cap × 1.5 = 12 CPUs, 48 GiB
    patch = oversold_patch(kubelet_node(), kubelet_node(), Resources(cpu_milli=14000, memory_mib=40960), 1.5)
    paths = _paths(patch)
    assert paths["/status/allocatable/cpu"] == "12" and paths["/status/allocatable/memory"] == "40Gi"
    assert json.loads(paths["/metadata/annotations"][KUBELET_ANNOTATION]) == {"cpu": "8", "memory": "32Gi"}
    assert json.loads(paths["/metadata/annotations"][WRITTEN_ANNOTATION]) == {"cpu": "12", "memory": "40Gi"}
    assert "(cap)" in patch.reason
    patched = apply_json_patch(kubelet_node(), patch.ops)
    assert patched["status"]["allocatable"] == {"cpu": "12", "memory": "40Gi", "pods": "110"}


def test_never_below_the_kubelets_figure_and_stale_annotations_go():
    # granted 4 CPUs, 16 GiB, below the kubelet's 8 and 32 GiB: its own figure, written back over ours
    node = _with(kubelet_node(), {"cpu": "12", "memory": "40Gi"}, OURS)
    patch = oversold_patch(node, node, Resources(cpu_milli=4000, memory_mib=16384), 1.5)
    patched = apply_json_patch(node, patch.ops)
    assert patched["status"]["allocatable"]["cpu"] == "8" and patched["status"]["allocatable"]["memory"] == "32Gi"
    assert patched["metadata"]["annotations"] == {}


def test_one_resource_oversold_the_other_not():
    # CPU granted 10 (> 8, < 12): 10; memory granted 30 GiB (< 32 GiB): the kubelet's
    node = kubelet_node(cpu="7910m", memory="32766436Ki", annotations={"other": "x"})
    patch = oversold_patch(node, node, Resources(cpu_milli=10000, memory_mib=30000), 1.5)
    assert _paths(patch) == {"/status/allocatable/cpu": "10",
                             "/metadata/annotations/tidal.dev~1kubelet-allocatable":
                                 '{"cpu":"7910m","memory":"32766436Ki"}',
                             "/metadata/annotations/tidal.dev~1oversold-allocatable":
                                 '{"cpu":"10","memory":"32766436Ki"}'}


def test_the_memory_cap_is_rounded_down_to_the_kib():
    # 1000 bytes × 1.5 = 1500 → 1024 (whole KiB), above 1000: 1Ki
    node = kubelet_node(memory="1000")
    patch = oversold_patch(node, node, Resources(cpu_milli=0, memory_mib=1), 1.5)
    assert _paths(patch)["/status/allocatable/memory"] == "1Ki"


def test_an_unreadable_figure_leaves_the_update_unchanged():
    patch = oversold_patch(kubelet_node(cpu="lots"), None, Resources(cpu_milli=9000, memory_mib=1), 1.5)
    assert patch.ops == [] and "not readable" in patch.reason


GRANTED = Resources(cpu_milli=14000, memory_mib=40960)


@pytest.mark.parametrize("review, granted, kubelet_only, patched, why", [
    (status_review(kubelet_node()), GRANTED, True, True, "cpu 8 -> 12 (cap)"),
    (status_review(kubelet_node()), None, True, False, "none known: unchanged"),
    (status_review(kubelet_node(), user="system:node:n2"), GRANTED, True, False, "not the kubelet of node n1"),
    (status_review(kubelet_node(), user="admin"), GRANTED, False, True, "cpu 8 -> 12"),
    (status_review(kubelet_node(), sub_resource=""), GRANTED, True, False, "not an update of nodes/status"),
    (status_review(kubelet_node(), operation="CREATE"), GRANTED, True, False, "not an update of nodes/status"),
])
def test_who_gets_patched(review, granted, kubelet_only, patched, why):
    result = answer(read_review(json.dumps(review).encode()), granted, "none known", max_factor=1.5,
                    kubelet_only=kubelet_only)
    assert bool(result.ops) == patched and why in result.reason


@pytest.mark.parametrize("body, uid", [
    (b"\xff", ""), (b"[]", ""), (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', ""),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                 "request": {"uid": "u"}}).encode(), "u"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                 "request": {"uid": "u", "resource": {}, "object": {"metadata": {}}, "oldObject": 3}}).encode(), "u"),
    (b" " * (4 * 1024 * 1024), ""),
])
def test_malformed_reviews(body, uid):
    with pytest.raises(ReviewError) as refused:
        read_review(body)
    assert refused.value.uid == uid


def test_the_response_carries_a_base64_json_patch():
    ops = [{"op": "replace", "path": "/status/allocatable/cpu", "value": "12"}]
    found = response("u1", "why", ops)["response"]
    assert found["uid"] == "u1" and found["allowed"] and found["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(found["patch"])) == ops
    assert "patch" not in response("u1", "why")["response"]
