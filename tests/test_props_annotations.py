"""Property tests of the bridge's pod parsing: any `tidal.dev/` annotation
or label value gives either a checked value or one precise problem naming
its key; any quantity text gives an exact value or a QuantityError; and a
pod built from any of them becomes a `PodLifecycle` that can be published."""

from __future__ import annotations

import string
from fractions import Fraction

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tidal_bridge.annotations import (
    ANNOTATION_KEYS, LABEL_KEYS, MAX_GPUS, MAX_NAME, PREFIX, WRITTEN_ON_PODS, Asks, parse_asks,
)
from tidal_bridge.binder import check_pod
from tidal_bridge.pods import kept_pod, pod_lifecycle, read_kept_pod, read_pod, slim_pod
from tidal_bridge.quantity import MAX_TEXT, QuantityError, count, cpu_milli, memory_mib, parse_quantity
from tidal_schemas import PlacementDecision, decode, encode, make_envelope
from tidal_schemas.common import MAX_INT

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KNOWN = sorted(ANNOTATION_KEYS) + sorted(LABEL_KEYS)
keys = st.one_of(st.sampled_from(KNOWN + sorted(WRITTEN_ON_PODS)),
                 st.text(max_size=12).map(lambda s: PREFIX + s), st.text(max_size=20))
# Values as people (and fuzzers) write them: words, numbers, padding, other scripts' digits.
values = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["true", "FALSE", " true ", "spread", "single-numa", "auto", "physical", "virtual", "ls", "BE",
                     "A100|V100", "|", "A100||V100", "", " ", "²", "٣", "１", "0x10", "1e3", "+5", "-0", "007"]),
    st.integers(min_value=-10, max_value=10**30).map(str),
    st.integers(min_value=20, max_value=6000).map(lambda n: "9" * n),
    st.text(alphabet=string.digits + " |-+.eE", max_size=12),
)
raw_values = st.one_of(values, st.integers(), st.floats(), st.booleans(), st.none(),
                       st.lists(st.integers(), max_size=2))


def check_asks(asks: Asks, given: dict) -> None:
    """Every parsed value is in its documented range; every problem is one
    line naming a `tidal.dev/` key that was given."""
    assert asks.gpu_count is None or 0 <= asks.gpu_count <= MAX_GPUS
    assert asks.gpu_milli is None or 1 <= asks.gpu_milli <= 1000
    assert all(0 < len(m) <= MAX_NAME for m in asks.gpu_models)
    assert asks.cpu_policy in (None, "spread", "single-numa", "auto")
    assert asks.gpu_kind in (None, "physical", "virtual") and asks.qos in (None, "LS", "BE")
    for name in (asks.gpu_group, asks.tenant, asks.user):
        assert name is None or 0 < len(name) <= MAX_NAME
    for problem in asks.problems:
        assert "\n" not in problem and "\r" not in problem and len(problem) < 400, problem
        assert problem.startswith(("annotation ", "label ", "annotations:", "labels:")), problem


@PROPS
@given(st.dictionaries(keys, raw_values, max_size=6), st.dictionaries(keys, raw_values, max_size=6))
def test_any_keys_and_values_give_values_or_precise_problems(annotations, labels):
    asks = parse_asks(annotations, labels)
    check_asks(asks, {**annotations, **labels})
    # unknown or misplaced keys are always reported, by (the start of) their name
    malformed = [("annotation", k) for k in annotations if k.startswith(PREFIX) and k not in WRITTEN_ON_PODS
                 and k not in ANNOTATION_KEYS]
    malformed += [("label", k) for k in labels if k in ANNOTATION_KEYS]
    for where, key in malformed:
        shown = key.encode("unicode_escape").decode() if not key.isprintable() else key
        assert any(p.startswith(f"{where} {shown[:40]}") for p in asks.problems), (key, asks.problems)


@PROPS
@given(st.sampled_from(KNOWN), values)
@example("tidal.dev/gpu-count", "²")
@example("tidal.dev/gpu-count", "٣")
@example("tidal.dev/gpu-count", "9" * 5000)
@example("tidal.dev/gpu-milli", "１０")
def test_each_key_either_parses_or_names_itself(key, value):
    where = "annotation" if key in ANNOTATION_KEYS else "label"
    asks = parse_asks({key: value}, {}) if where == "annotation" else parse_asks({}, {key: value})
    check_asks(asks, {key: value})
    field = (ANNOTATION_KEYS.get(key) or LABEL_KEYS[key])[0]
    if asks.problems:
        (problem,) = asks.problems
        assert problem.startswith(f"{where} {key}: ")
        assert getattr(asks, field) in (None, ())
    else:
        assert getattr(asks, field) not in (None, ())
        if field in ("gpu_count", "gpu_milli"):
            assert value.strip().isascii() and int(value) == getattr(asks, field)


@PROPS
@given(st.integers(min_value=0, max_value=MAX_GPUS), st.integers(min_value=1, max_value=1000),
       st.sampled_from(["", " ", "\t"]))
def test_whole_numbers_in_range_round_trip(gpus, milli, pad):
    asks = parse_asks({PREFIX + "gpu-count": f"{pad}{gpus}{pad}", PREFIX + "gpu-milli": str(milli)}, {})
    assert (asks.gpu_count, asks.gpu_milli, asks.problems) == (gpus, milli, ())


@PROPS
@given(st.one_of(raw_values, st.dictionaries(st.integers(), st.text(), max_size=2), st.text()),
       st.one_of(raw_values, st.dictionaries(st.one_of(st.none(), st.integers()), st.text(), max_size=2)))
def test_annotations_that_are_not_string_mappings(annotations, labels):
    check_asks(parse_asks(annotations, labels), {})


# -- quantities ------------------------------------------------------------------------

suffixes = st.sampled_from(["", "m", "u", "n", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
                            "e3", "E-2", "e0", "e+6"])
SCALE = {"": 1, "m": Fraction(1, 1000), "u": Fraction(1, 10**6), "n": Fraction(1, 10**9), "k": 10**3, "M": 10**6,
         "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
         "Pi": 2**50, "Ei": 2**60, "e3": 10**3, "E-2": Fraction(1, 100), "e0": 1, "e+6": 10**6}


@PROPS
@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=999), suffixes)
def test_valid_quantities_are_exact(whole, thousandths, suffix):
    text = f"{whole}.{thousandths:03d}{suffix}"
    assert parse_quantity(text) == (whole + Fraction(thousandths, 1000)) * SCALE[suffix]


quantity_texts = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=string.digits + ".eE+-mkMGTPiKnu ", max_size=30),
    st.integers(min_value=0, max_value=10**9).map(lambda e: f"1e{e}"),
    st.integers(min_value=0, max_value=10**9).map(lambda e: f"1e-{e}"),
    st.integers(min_value=10, max_value=20_000).map(lambda n: "9" * n),
    st.integers(min_value=10, max_value=20_000).map(lambda n: "0." + "0" * n + "1"),
    st.integers(min_value=0, max_value=2**70).map(lambda n: f"{n}Ei"),
)


@PROPS
@given(st.one_of(quantity_texts, st.integers(), st.floats(), st.booleans(), st.none(), st.binary(max_size=4)))
@example("1e999999999")
@example("9" * 5000)
@example(float("inf"))
@example(10**400)
def test_any_quantity_text_is_exact_or_a_quantity_error(text):
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) <= MAX_TEXT + 80, message
        return
    assert isinstance(value, Fraction) and value >= 0
    for unit in (cpu_milli, memory_mib, count):
        try:
            result = unit(text)
        except QuantityError as exc:
            assert "too large" in str(exc)
            continue
        assert isinstance(result, int) and 0 <= result <= MAX_INT


# -- whole pods ------------------------------------------------------------------------

@PROPS
@given(st.dictionaries(keys, values, max_size=5), st.dictionaries(keys, values, max_size=3),
       st.lists(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                                st.one_of(quantity_texts, st.integers(min_value=-5, max_value=2**80)), max_size=3),
                min_size=1, max_size=3))
def test_any_pod_becomes_a_publishable_event(annotations, labels, requests):
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations, "labels": labels},
           "spec": {"containers": [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(requests)]}}
    event = pod_lifecycle(pod)
    envelope = make_envelope(event, cluster="c1", source="bridge")
    assert decode(encode(envelope)) == envelope
    assert event.invalid_reason is None or "\n" not in event.invalid_reason


# The bridge's watch keeps each pod as `slim_pod` leaves it, in JSON text
# (`kept_pod`): read back, it must be the pod it was, whatever else the pod carried.
containers = st.lists(st.fixed_dictionaries(
    {"name": st.text(max_size=8),
     "resources": st.fixed_dictionaries({}, optional={
         "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity_texts, max_size=3),
         "limits": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity_texts, max_size=3)}),
     "image": st.just("registry.k8s.io/pause:3.9"), "env": st.just([{"name": "A", "value": "b" * 50}])},
    optional={"restartPolicy": st.sampled_from(["Always", "Never"])}), max_size=3)


@PROPS
@given(st.dictionaries(keys, values, max_size=5), st.dictionaries(keys, values, max_size=3), containers, containers,
       st.fixed_dictionaries({}, optional={
           "nodeName": st.sampled_from(["n1", ""]), "schedulerName": st.sampled_from(["tidal", "default-scheduler"]),
           "priority": st.integers(min_value=-10, max_value=10**9),
           "priorityClassName": st.sampled_from(["system-node-critical", "high"]),
           "overhead": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity_texts, max_size=2)}),
       st.fixed_dictionaries({}, optional={
           "phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
           "qosClass": st.sampled_from(["Guaranteed", "Burstable", "BestEffort"]),
           "startTime": st.sampled_from(["2026-01-01T00:00:00Z", "not a time"])}),
       st.booleans(), st.booleans())
def test_a_pod_kept_slim_reads_as_the_whole_pod(annotations, labels, main, init, spec, status, deleted, deleting):
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                        "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations, "labels": labels,
                        "managedFields": [{"manager": "kubectl"}], "ownerReferences": [{"kind": "ReplicaSet"}],
                        **({"deletionTimestamp": "2026-01-01T00:01:00Z"} if deleting else {})},
           "spec": {**spec, "containers": main, "initContainers": init, "volumes": [{"name": "v"}],
                    "tolerations": [{"key": "k"}]},
           "status": {**status, "conditions": [{"type": "Ready"}], "containerStatuses": [{"name": "c"}],
                      "podIP": "10.0.0.1"}}
    kept = read_kept_pod(kept_pod(pod))  # as the watch keeps it and reads it back
    assert kept == slim_pod(pod) and isinstance(kept_pod(pod), str)
    assert read_pod(kept, deleted=deleted) == read_pod(pod, deleted=deleted)
    for node, did in (("n1", ""), ("n2", "d1")):
        decision = PlacementDecision(decision_id=did or "d0", namespace="ns", name="p", outcome="placed", node=node,
                                     uid="u1")
        on_kept, on_pod = check_pod(kept, decision, "tidal"), check_pod(pod, decision, "tidal")
        assert (on_kept is None) == (on_pod is None)
        assert on_kept is None or (on_kept.ok, on_kept.reason) == (on_pod.ok, on_pod.reason)
    assert "volumes" not in kept["spec"] and "conditions" not in kept["status"]
    assert all(k.startswith(PREFIX) for k in kept["metadata"]["annotations"])


def test_a_kept_pod_reads_back_exactly_whatever_json_the_api_server_sent():
    # what `json.loads` reads from a hostile or broken server: past 64 bits, NaN, a lone surrogate
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {"tidal.dev/x": "\ud800"}},
           "spec": {"priority": 10**30, "containers": []}, "status": {"startTime": float("nan")}}
    kept = read_kept_pod(kept_pod(pod))
    assert kept["spec"]["priority"] == 10**30 and kept["metadata"]["annotations"] == {"tidal.dev/x": "\ud800"}
    assert kept["status"]["startTime"] != kept["status"]["startTime"]  # NaN, not null
    assert kept_pod(kept) == kept_pod(pod)
