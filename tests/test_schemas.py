"""The schema library: round trips, tolerance of unknown fields, precise
rejection of wrong types, and the generated files kept in step."""

from __future__ import annotations

import shutil
import uuid

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import metrics, pod
from conftest import ROOT
from tidal_schemas import (
    Gpu, NodeAction, NodeTopology, PlacementDecision, PlacementDecisions, SchemaError, decode, derived_id, encode,
    event_types, make_envelope,
)
from tidal_schemas.placement import MAX_DECISIONS
from tidal_schemas import export
from tidal_schemas.envelope import _EVENT_ID_NAMESPACE as EVENT_ID_NAMESPACE
from tidal_schemas.streams import STREAMS
from tidal_simulator.topology_builder import make_topology


def _wire(payload, **changes) -> dict:
    raw = orjson.loads(encode(make_envelope(payload, cluster="c1", source="test")))
    for path, value in changes.items():
        target = raw
        *parents, last = path.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
    return raw


def test_round_trip_keeps_every_field():
    original = make_envelope(pod("p1", cpu_milli=2000, exclusive_cpus=True, cpu_policy="spread"),
                             cluster="c1", source="test")
    assert decode(encode(original)) == original


def test_unknown_fields_from_newer_producers_are_ignored():
    raw = _wire(metrics("n1"), **{"payload.future_field": {"x": 1}, "trace_id": "abc"})
    assert decode(orjson.dumps(raw)).payload.node == "n1"


@pytest.mark.parametrize("path, value, message", [
    ("payload.requests.cpu_milli", "lots", "field 'payload.requests.cpu_milli': Input should be a valid integer"),
    ("payload.requests.cpu_milli", -5, "field 'payload.requests.cpu_milli': Input should be greater than or equal to 0"),
    ("payload.phase", "exploded", "field 'payload.phase': Input should be 'pending', 'bound', 'running' or 'deleted'"),
    ("cluster", "has spaces", "field 'cluster': String should match pattern"),
    ("payload.qos", 3, "field 'payload.qos'"),
    # a time without its zone is a guess, and placement's queue cannot order it against one with a zone
    ("payload.created_at", "2026-11-27T12:28:21", "field 'payload.created_at': Input should have timezone info"),
    ("time", "2026-11-27T12:28:21", "field 'time': Input should have timezone info"),
])
def test_wrong_types_are_rejected_naming_the_field(path, value, message):
    with pytest.raises(SchemaError) as caught:
        decode(orjson.dumps(_wire(pod("p1"), **{path: value})))
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("raw, message", [
    (b"[1, 2]", "an event must be a JSON object"),
    (b"nope", "not JSON"),
    (b'{"type": "no.such"}', "unknown event type 'no.such'"),
    (b'{"version": 1}', "field 'type': missing"),
])
def test_malformed_events(raw, message):
    with pytest.raises(SchemaError, match=message):
        decode(raw)


def test_newer_version_than_known_is_rejected():
    raw = _wire(metrics("n1"), version=2)
    with pytest.raises(SchemaError, match="version 2 is newer than the supported 1"):
        decode(orjson.dumps(raw))


def test_cross_field_rules():
    with pytest.raises(ValueError, match="whole, non-zero number of CPUs"):
        pod("p1", cpu_milli=1500, exclusive_cpus=True)
    with pytest.raises(ValueError, match="must name its node"):
        pod("p1", phase="running")
    with pytest.raises(ValueError, match="must give target_numa"):
        NodeAction(action_id="a", node="n", kind="set-cpuset", pod="ns/p", reason="r")
    with pytest.raises(ValueError, match="must name its physical parent"):
        Gpu(id="mig0", model="A100", kind="virtual")
    with pytest.raises(ValueError, match="name a parent that is not a physical GPU"):
        NodeTopology.model_validate({**make_topology("n1").model_dump(), "gpus": [
            {"id": "mig0", "model": "A100", "kind": "virtual", "parent": "gpu9"}]})


def test_outputs_of_the_same_cause_get_the_same_id():
    cause = make_envelope(metrics("n1"), cluster="c1", source="test")
    a = make_envelope(metrics("n1"), cluster="c1", source="x", cause=cause)
    b = make_envelope(metrics("n1"), cluster="c1", source="x", cause=cause)
    assert a.id == b.id == derived_id(cause.id, "node.metrics", "n1")
    assert make_envelope(metrics("n1"), cluster="c1", source="x", cause=cause, discriminator="2").id != a.id



@given(st.text(max_size=60), st.text(max_size=30), st.text(max_size=60), st.text(max_size=20))
def test_a_derived_id_is_the_uuid5_of_its_parts(cause, event_type, key, discriminator):
    """Ids already stored were made by uuid.uuid5: consumers drop an output
    published again only while the same parts give the same id."""
    name = f"{cause}/{event_type}/{key}/{discriminator}"
    assert derived_id(cause, event_type, key, discriminator) == str(uuid.uuid5(EVENT_ID_NAMESPACE, name))

def test_a_cycles_decisions_travel_as_one_event_and_a_version_1_decision_as_a_batch_of_one():
    a, b = (PlacementDecision(decision_id=f"d-{n}", namespace="ns", name=n, outcome="placed", node="n1") for n in "ab")
    event = make_envelope(PlacementDecisions.of(a, b), cluster="c1", source="placement")
    assert (event.version, event.key) == (2, "ns/a") and decode(encode(event)).payload.items == [a, b]
    # what placement published before batches: the decision itself as the payload
    old = {**_wire(PlacementDecisions.of(b)), "version": 1, "key": "ns/b"}
    old["payload"] = old["payload"]["items"][0]
    assert decode(orjson.dumps(old)).payload.items == [b]
    with pytest.raises(SchemaError, match="identity"):  # the key is the first decision's pod
        decode(orjson.dumps({**_wire(PlacementDecisions.of(a, b)), "key": "ns/b"}))
    with pytest.raises(SchemaError, match="payload.items"):
        decode(orjson.dumps(_wire(PlacementDecisions.of(a), **{"payload.items": []})))
    with pytest.raises(ValueError, match="items"):
        PlacementDecisions(items=[a] * (MAX_DECISIONS + 1))
    with pytest.raises(ValueError, match="trace"):
        PlacementDecision.model_validate(a.model_dump() | {"trace": "x" * 257})


def test_every_event_type_has_a_stream_and_a_key():
    assert set(event_types()) == set(STREAMS)
    assert pod("p1", namespace="ns").event_key() == "ns/p1"
    assert metrics("n9").event_key() == "n9"


def test_generated_files_match_the_models():
    assert export.drift(ROOT / "schemas") == []


def test_drift_is_detected(tmp_path):
    copy = tmp_path / "schemas"
    shutil.copytree(ROOT / "schemas", copy)
    (copy / "node.metrics.json").write_text("{}")
    (copy / "stale.json").write_text("{}")
    (copy / "pod.lifecycle.json").unlink()
    problems = export.drift(copy)
    assert "node.metrics.json: differs from the models" in problems
    assert "stale.json: no model produces it" in problems
    assert "pod.lifecycle.json: missing" in problems


def test_asyncapi_lists_every_stream():
    doc = export.asyncapi_document()
    assert doc["asyncapi"].startswith("3.")
    assert {m["name"] for m in doc["components"]["messages"].values()} == set(STREAMS)
    assert doc["channels"]["node_metrics"]["address"] == "tidal.node_metrics.{cluster}.{partition}.{key}"


def test_decision_fence_admits_only_the_current_leader():
    from tidal_schemas import PlacementDecision
    from tidal_schemas.fence import DecisionFence, fence_decision

    def placed(name, epoch, leader):
        return PlacementDecision(decision_id=name, namespace="ns", name=name, outcome="placed", node="n1",
                                 epoch=epoch, leader=leader)

    fence = DecisionFence()
    assert fence.admit(placed("tool", 0, ""))            # before any fence: unfenced decisions count
    assert fence.admit(fence_decision(1, "a"))
    assert not fence.admit(placed("late-tool", 0, ""))   # ...but not after
    assert fence.admit(placed("p1", 1, "a"))
    assert not fence.admit(fence_decision(1, "b"))        # same epoch claimed second: loses
    assert not fence.admit(placed("p2", 1, "b"))
    assert fence.admit(fence_decision(2, "b"))            # b takes over
    assert not fence.admit(placed("p3", 1, "a"))          # a's late decision is ignored
    assert fence.admit(placed("p4", 2, "b"))
