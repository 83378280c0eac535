"""Property tests of the event decoders: whatever arrives — random bytes,
random JSON, a valid event with one field fuzzed, truncated, deeply nested,
huge numbers, wrong types — `decode` either returns an event that encodes
back to itself, or raises `SchemaError` with one short line. Never another
exception, never a hang."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidal_schemas import (
    ActionResult, BindResult, CpuAssignment, DeadLetter, NodeAction, NodeAllocatable, NodeAllocatables, NodeMetrics, NodeScore, NodeScores,
    NodeStatus, NodeTopology, PlacementDecision, PlacementDecisions, StageJournal, PodLifecycle, SchemaError, TenantConfig, TenantUsage,
    UserScore, decode, decode_obj,
    encode, event_types, make_envelope,
)
from tidal_schemas.errors import MAX_MESSAGE
from tidal_schemas.streams import STREAMS

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# One valid, richly filled payload per event type: the fuzzers start from these.
SAMPLES = {
    "node.topology": NodeTopology(
        node="n1", cpus=[{"cpu": 0, "core": 0, "socket": 0, "numa": 0}, {"cpu": 1, "core": 0, "socket": 0, "numa": 0}],
        numa_nodes=[{"id": 0, "cpus": [0, 1], "memory_mib": 1024, "capacity_cpus": 2, "allocatable_cpus": 1}],
        reserved_cpus=[0], exclusive_cpus=True, gpus=[{"id": "gpu0", "model": "A100", "numa": 0}],
        capacity={"cpu_milli": 2000, "memory_mib": 1024, "gpu_milli": 1000},
        allocatable={"cpu_milli": 1000, "memory_mib": 512, "gpu_milli": 1000}, labels={"zone": "a"}),
    "node.metrics": NodeMetrics(
        node="n1", sampled_at=T0, interval_s=10, cpu_util={0: 0.5, 1: 0.25}, numa_load={0: 0.4},
        node_cpu_util=0.4, cpu_used_milli=800, memory_used_mib=100, memory_total_mib=1024,
        pods=[{"pod": "ns/p", "cpu_milli": 100, "memory_mib": 10, "qos": "LS", "cpuset": [1], "numa_nodes": [0]}]),
    "node.allocatable": NodeAllocatables.of(NodeAllocatable(
        node="n1", policy="factor", capacity={"cpu_milli": 2000}, allocatable={"cpu_milli": 3000}, factor=1.5,
        inputs={"peak": 0.3}, reason="r")),
    "node.status": NodeStatus(node="n1", allocatable={"cpu_milli": 3000, "memory_mib": 1024}),
    "pod.lifecycle": PodLifecycle(
        namespace="ns", name="p", uid="u", phase="running", node="n1", requests={"cpu_milli": 2000, "memory_mib": 64},
        exclusive_cpus=True, cpu_policy="spread",
        gpu={"count": 1, "milli": 500, "models": ["A100"], "kind": "physical"},
        tenant="t", user="u", qos="LS", priority=10, created_at=T0, started_at=T0, labels={"a": "b"},
        numa_cpus={0: 2}, gpus=[{"gpu": "gpu0", "milli": 500, "model": "A100"}]),
    "tenant.config": TenantConfig(
        tenant="t", permissions={"nodes": ["n1"], "gpus": ["gpu0"]}, quota={"cpu": 4000, "A100": 2000},
        groups=[{"name": "g", "bindings": [{"node": "n1", "gpus": ["gpu0"]}]}]),
    "tenant.usage": TenantUsage(tenant="t", held={"A100": 1500, "gpu": 1500, "cpu": 2000}, quota={"A100": 2000},
                                groups_free={"g": 1}, measured_at=T0),
    "score.user": UserScore(user="u", resource_type="A100", score=1.5, usage=2.0, updated_at=T0, adjust_time_s=60),
    "score.node": NodeScores.of(NodeScore(node="n1", load=0.5, numa_load={0: 0.5}, sampled_at=T0, peak={
        "estimator": "percentile", "window_s": 300, "samples": 10, "utilisation": 0.6, "cpu_milli": 100})),
    "placement.decision": PlacementDecisions.of(PlacementDecision(
        decision_id="d", namespace="ns", name="p", outcome="placed", node="n1", numa_cpus={0: 2}, numa_nodes=[0],
        gpus=[{"gpu": "gpu0", "milli": 1000}], chosen={"node": "n1", "score": 1.0, "breakdown": {"load": 0.5}},
        runners_up=[{"node": "n2", "score": 2.0}], filtered={"memory": 1}, reason="ok", queue_position=0,
        fair_share_score=0.1, epoch=1, leader="a", trace="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        PlacementDecision(decision_id="e", namespace="ns", name="q", outcome="pending", reason="0/1 nodes fit",
                          filtered={"cpu": 1}, nodes=1)),
    "stage.journal": StageJournal(stage="placement", member="a1b2c3", seq=0, steps=[
        ("read", 1.5, "pod.lifecycle", "e1"), ("held", 1.5, "tenant.config", "{}"), ("cycle", 2.0, "", ""),
        ("took", 2.0, "1", ""), ("ended", 2.0, "", "")]),
    "bind.result": BindResult(decision_id="d", namespace="ns", name="p", node="n1", ok=False, reason="gone"),
    "node.action": NodeAction(action_id="a", node="n1", kind="set-cpuset", pod="ns/p", cpuset=[1, 2], mems=[0],
                              reason="hot", measured={"load": 0.9}, dry_run=True, requested_by="remediation"),
    "action.result": ActionResult(action_id="a", node="n1", kind="freeze", pod="ns/p", status="done"),
    "cpu.assignment": CpuAssignment(node="n1", pod="ns/p", container="c", cpuset=[1, 2]),
    "dead.letter": DeadLetter(stream="node.metrics", key="k", consumer="scoring", reason="r",
                              original_b64="AAAA", original_size=3),
}


def wire(event_type: str) -> dict[str, Any]:
    """The sample event of `event_type` as its JSON object."""
    return orjson.loads(encode(make_envelope(SAMPLES[event_type], cluster="c1", source="test", time=T0)))


def outcome(data: bytes | str | Any, *, as_object: bool = False):
    """Decode; an accepted event must encode back to itself, a refused one
    must say why on one short line. Any other exception fails the test."""
    try:
        envelope = decode_obj(data) if as_object else decode(data)
    except SchemaError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message, repr(message)
        assert len(message) <= MAX_MESSAGE, len(message)
        return exc
    again = decode(encode(envelope))
    assert again == envelope
    return envelope


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (dict keys and list indexes), the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, (*prefix, index))
    return found


def replaced(document: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy = dict(document) if isinstance(document, dict) else list(document)
    copy[head] = replaced(document[head], tuple(rest), new)
    return copy


def deleted(document: Any, path: tuple) -> Any:
    head, *rest = path
    copy = dict(document) if isinstance(document, dict) else list(document)
    if rest:
        copy[head] = deleted(document[head], tuple(rest))
    elif isinstance(copy, dict):
        del copy[head]
    else:
        copy.pop(head)
    return copy


def at(document: Any, path: tuple) -> Any:
    for part in path:
        document = document[part]
    return document


scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=16)
event_type_names = st.sampled_from(sorted(SAMPLES))


def test_samples_cover_every_event_type_and_stream():
    assert set(SAMPLES) == set(event_types()) == set(STREAMS)
    for name in SAMPLES:
        assert outcome(orjson.dumps(wire(name))).type == name


@PROPS
@given(event_type_names, st.floats(min_value=0, allow_nan=False, allow_infinity=False), st.text(max_size=12))
def test_encode_writes_what_orjson_writes_of_the_events_json_form(event_type, number, text):
    """`encode` uses pydantic's JSON writer: the bytes are those orjson
    writes of `model_dump(mode="json")`, as an earlier Tidal published
    them (any float, any text)."""
    payload = SAMPLES[event_type]
    if event_type == "score.user":
        payload = payload.model_copy(update={"score": number})
    if event_type == "dead.letter":
        payload = payload.model_copy(update={"reason": text})
    envelope = make_envelope(payload, cluster="c1", source="s")
    assert encode(envelope) == orjson.dumps(envelope.model_dump(mode="json"))


def test_text_json_cannot_hold_is_refused_with_the_reason():
    letter = SAMPLES["dead.letter"].model_copy(update={"reason": "a lone \ud800 surrogate"})  # as YAML can carry
    with pytest.raises(SchemaError, match="cannot be written as JSON.*surrogates not allowed"):
        encode(make_envelope(letter, cluster="c1", source="s"))


@PROPS
@given(st.binary(max_size=600))
def test_random_bytes(data):
    outcome(data)


@PROPS
@given(json_values)
def test_random_json(value):
    assert isinstance(outcome(orjson.dumps(value)), SchemaError)  # nothing random is a whole event


@PROPS
@given(event_type_names, st.dictionaries(st.sampled_from(["id", "version", "cluster", "key", "time", "source",
                                                          "causation_id", "payload"]), json_values))
def test_random_fields_around_a_known_type(event_type, fields):
    outcome(orjson.dumps({**fields, "type": event_type}))


@PROPS
@given(event_type_names, st.data())
def test_truncated_events_are_refused(event_type, data):
    raw = encode(make_envelope(SAMPLES[event_type], cluster="c1", source="test"))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    assert isinstance(outcome(raw[:cut]), SchemaError)


@PROPS
@given(event_type_names, st.data(), json_values)
def test_one_field_replaced_by_anything(event_type, data, value):
    document = wire(event_type)
    path = data.draw(st.sampled_from(paths(document)))
    outcome(orjson.dumps(replaced(document, path, value)))


@PROPS
@given(event_type_names, st.data())
def test_one_field_removed(event_type, data):
    document = wire(event_type)
    path = data.draw(st.sampled_from(paths(document)[1:]))
    outcome(orjson.dumps(deleted(document, path)))


@PROPS
@given(event_type_names, st.data())
def test_wrong_types_in_every_field(event_type, data):
    document = wire(event_type)
    path = data.draw(st.sampled_from(paths(document)[1:]))
    current = at(document, path)
    wrong = data.draw(json_values.filter(lambda v: type(v) is not type(current)))
    outcome(orjson.dumps(replaced(document, path, wrong)))


@PROPS
@given(event_type_names, st.data(), st.integers(min_value=1, max_value=4000))
def test_deep_nesting(event_type, data, depth):
    document = wire(event_type)
    path = data.draw(st.sampled_from(paths(document)))
    nested = (b"[" * depth + b"1" + b"]" * depth) if data.draw(st.booleans()) else \
        (b'{"a":' * depth + b"1" + b"}" * depth)
    text = orjson.dumps(replaced(document, path, "@@NESTED@@")).replace(b'"@@NESTED@@"', nested)
    outcome(text)


huge_literals = st.one_of(
    st.integers(min_value=2**63 - 2, max_value=2**70).map(str),
    st.integers(min_value=-(2**70), max_value=-(2**63) + 2).map(str),
    st.integers(min_value=20, max_value=5000).map(lambda n: "9" * n),
    st.integers(min_value=300, max_value=400).map(lambda e: f"1e{e}"),
    st.integers(min_value=1, max_value=320).map(lambda e: f"-1e-{e}"),
    st.sampled_from(["1.7976931348623157e308", "5e-324", "-0.0", "1E400", "NaN", "Infinity", "-Infinity"]),
)


@PROPS
@given(event_type_names, st.data(), huge_literals)
def test_huge_numbers_in_every_field(event_type, data, literal):
    document = wire(event_type)
    path = data.draw(st.sampled_from(paths(document)[1:]))
    text = orjson.dumps(replaced(document, path, "@@NUMBER@@")).replace(b'"@@NUMBER@@"', literal.encode())
    outcome(text)


@PROPS
@given(event_type_names, st.data(), st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(
    ["\n", "\r", "\x00", "\u2028", "\ufeff"]), max_size=300))
def test_strange_text_in_every_field(event_type, data, text):
    document = wire(event_type)
    path = data.draw(st.sampled_from(paths(document)[1:]))
    outcome(orjson.dumps(replaced(document, path, text)))
    if isinstance(at(document, path[:-1]), dict):  # the text as a key, too
        parent = at(document, path[:-1])
        outcome(orjson.dumps(replaced(document, path[:-1], {**parent, text: parent[path[-1]]})))


@PROPS
@given(event_type_names, st.data(), st.one_of(
    st.floats(), st.integers(min_value=2**63 - 1, max_value=2**200), st.integers(max_value=-(2**63)),
    st.binary(max_size=8), st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3),
    st.sets(st.integers(), max_size=3), st.dates(), st.datetimes(),
    st.tuples(st.integers()), st.complex_numbers(allow_nan=False, allow_infinity=False, max_magnitude=10)))
def test_python_values_from_yaml_files(event_type, data, value):
    """`tidal events publish` validates YAML documents with `decode_obj`:
    they may hold values JSON cannot (nan, inf, bytes, sets, dates)."""
    document = wire(event_type)
    path = data.draw(st.sampled_from(paths(document)[1:]))
    outcome(replaced(document, path, value), as_object=True)


@pytest.mark.parametrize("data", [
    "{\"type\": \"node.metrics\", \"id\": \"\ud800\"}",   # a lone surrogate in a str
    b"\xef\xbb\xbf{}",                                   # a byte-order mark
    b"",
    b" " * 100_000,
    b'{"type": "' + b"x" * 200_000 + b'"}',
    b'{"type": "node.metrics", "version": 1e30}',
    b'{"type": "node.metrics", "version": 2.0}',
    b'{"type": "node.metrics", "version": 99999999999999999999999}',
])
def test_known_nasty_inputs(data):
    assert isinstance(outcome(data), SchemaError)


def test_an_int_beyond_64_bits_is_refused_not_accepted_as_unencodable():
    document = wire("node.metrics")
    text = orjson.dumps(replaced(document, ("payload", "cpu_used_milli"), "@")).replace(b'"@"', b"18446744073709551616")
    with pytest.raises(SchemaError, match="payload.cpu_used_milli"):
        decode(text)


@pytest.mark.parametrize("version", [2, 99, 2**64])
def test_a_newer_version_is_refused(version):
    document = replaced(wire("node.metrics"), ("version",), version)
    with pytest.raises(SchemaError, match="is newer than the supported 1"):
        decode_obj(document)


@pytest.mark.parametrize("version", ["99", "1", True, 1.0, 2.0, 1e30, None])
def test_a_version_is_an_integer_never_a_string_bool_or_float(version):
    # "99" once passed the newer-version check that refuses 99, and true read as 1
    document = replaced(wire("node.metrics"), ("version",), version)
    with pytest.raises(SchemaError, match="field 'version'"):
        decode_obj(document)


def test_messages_name_odd_keys_on_one_line():
    document = replaced(wire("node.topology"), ("payload", "labels"), {"a\nb": 5})
    with pytest.raises(SchemaError) as caught:
        decode(orjson.dumps(document))
    assert "payload.labels.a\\nb" in str(caught.value)


def test_non_finite_floats_are_refused_where_json_cannot_carry_them():
    for value in (math.inf, -math.inf, math.nan):
        document = replaced(wire("node.metrics"), ("payload", "interval_s"), value)
        assert isinstance(outcome(document, as_object=True), SchemaError)


def test_journal_settings_nested_past_what_encodes_are_refused_on_one_line():
    # found by test_deep_nesting: settings 256 deep were accepted, then could not be encoded to publish
    document = wire("stage.journal")
    for depth, accepted in ((32, True), (33, False), (256, False)):
        nested = b'{"a":' * (depth - 1) + b"1" + b"}" * (depth - 1)
        text = orjson.dumps(replaced(document, ("payload", "settings"), "@@N@@")).replace(
            b'"@@N@@"', b'{"k":' + nested + b"}" if depth > 1 else b"{}")
        result = outcome(text)
        assert isinstance(result, SchemaError) != accepted, (depth, result)
        if not accepted:
            assert "nested deeper than 32 levels" in str(result)
