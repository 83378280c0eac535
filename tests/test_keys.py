"""Keys that cannot collide (issue 17, item 2): one encoding of a pod's key,
`namespace/name`, kept one-to-one by refusing a '/' in either part; NUMA and
CPU ids bounded where events carry them, and unique in a node's topology."""

from __future__ import annotations

import time

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import T0, pod
from tidal_schemas import (
    BindResult,
    Cpu,
    NodeTopology,
    NumaNode,
    PlacementDecision,
    PodLifecycle,
    Resources,
    SchemaError,
    TenantConfig,
    decode,
    encode,
    make_envelope,
    pod_key,
)
from tidal_schemas.decision_codec import NUMA_CPUS, read_decision, write_decision
from conftest import patience

NAMES = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=20)


def _event(payload_type: str, payload: dict) -> bytes:
    return orjson.dumps({"id": "e1", "type": payload_type, "version": 1, "cluster": "c1", "key": "x",
                         "time": "2026-01-01T00:00:00Z", "source": "t", "payload": payload})


@pytest.mark.parametrize("namespace, name", [("a", "b/c"), ("a/b", "c"), ("/", "x"), ("x", "/")])
def test_pod_names_with_a_slash_are_refused_so_keys_cannot_collide(namespace, name):
    # (a, b/c) and (a/b, c) would both be the key a/b/c
    with pytest.raises(ValueError, match="namespace|name"):
        pod(name, namespace=namespace)
    for event_type, payload in (
            ("pod.lifecycle", {"namespace": namespace, "name": name, "phase": "pending",
                               "created_at": "2026-01-01T00:00:00Z"}),
            ("placement.decision", {"decision_id": "d", "namespace": namespace, "name": name, "outcome": "pending"}),
            ("bind.result", {"decision_id": "d", "namespace": namespace, "name": name, "node": "n", "ok": True})):
        with pytest.raises(SchemaError, match=r"field 'payload\.(items\.0\.)?(namespace|name)'"):
            decode(_event(event_type, payload))


@given(NAMES, NAMES, NAMES, NAMES)
def test_pod_key_is_one_to_one(ns1, name1, ns2, name2):
    if pod_key(ns1, name1) == pod_key(ns2, name2):
        assert (ns1, name1) == (ns2, name2)


def test_every_pod_event_uses_the_one_key_encoding():
    decision = PlacementDecision(decision_id="d", namespace="ns", name="p", outcome="pending")
    bound = BindResult(decision_id="d", namespace="ns", name="p", node="n", ok=True)
    assert {pod("p", namespace="ns").event_key(), decision.event_key(), bound.event_key()} == {pod_key("ns", "p")}


@pytest.mark.parametrize("numa_cpus", [{-1: 5}, {1024: 1}, {2**40: 1}])
def test_numa_ids_out_of_any_machines_range_are_refused(numa_cpus):
    with pytest.raises(ValueError, match="numa_cpus"):
        pod("p", phase="bound", node="n", numa_cpus=numa_cpus, exclusive_cpus=True, cpu_milli=5000)
    with pytest.raises(ValueError, match="numa_cpus"):
        PlacementDecision(decision_id="d", namespace="ns", name="p", outcome="placed", node="n", numa_cpus=numa_cpus)


def test_a_decision_annotation_with_an_impossible_numa_id_is_a_problem_not_a_holding():
    annotations = write_decision(PlacementDecision(decision_id="d", namespace="ns", name="p", outcome="placed",
                                                   node="n", numa_cpus={0: 2}))
    held, problem = read_decision({**annotations, NUMA_CPUS: '{"99999": 7}'})
    assert held is None and "NUMA id '99999'" in problem
    held, problem = read_decision({**annotations, NUMA_CPUS: '{"-1": 5}'})
    assert held is None and "NUMA id '-1'" in problem


def _topology(cpus: list[Cpu], numa: list[NumaNode]) -> NodeTopology:
    return NodeTopology(node="n", cpus=cpus, numa_nodes=numa, capacity=Resources(cpu_milli=4000),
                        allocatable=Resources(cpu_milli=4000))


def test_a_topology_names_each_cpu_and_numa_node_once():
    cpu = [Cpu(cpu=i, core=i, socket=0, numa=0) for i in range(2)]
    _topology(cpu, [NumaNode(id=0, cpus=[0, 1])])
    with pytest.raises(ValueError, match="CPU ids must be unique, repeated: 1"):
        _topology([*cpu, Cpu(cpu=1, core=1, socket=0, numa=0)], [NumaNode(id=0, cpus=[0, 1])])
    with pytest.raises(ValueError, match="NUMA node ids must be unique, repeated: 0"):
        _topology(cpu, [NumaNode(id=0, cpus=[0]), NumaNode(id=0, cpus=[1])])
    with pytest.raises(ValueError, match="cpu"):
        Cpu(cpu=-1, core=0, socket=0, numa=0)


def test_uniqueness_checks_are_linear():
    """60,000 tenant groups (a 2 MB file) took past 200 s with list.count; a
    Counter takes well under a second: the bound is a hang guard, which a
    quadratic check overruns even on this machine."""
    groups = [{"name": f"g{i}", "bindings": [{"node": "n", "gpus": ["0"]}]} for i in range(60_000)]
    started = time.perf_counter()
    with pytest.raises(ValueError, match="repeated: g7 "):
        TenantConfig.model_validate({"tenant": "t", "groups": [*groups, groups[7]]})
    assert time.perf_counter() - started < patience(20.0)


def test_bound_pod_keeps_its_numa_holding_through_the_wire():
    bound = PodLifecycle(namespace="ns", name="p", phase="bound", node="n", created_at=T0, exclusive_cpus=True,
                         requests=Resources(cpu_milli=3000), numa_cpus={0: 1, 1: 2})
    assert decode(encode(make_envelope(bound, cluster="c1", source="t"))).payload.numa_cpus == {0: 1, 1: 2}
