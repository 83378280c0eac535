"""The decision a pod carries: written and read back by one module, so what a
bound pod holds survives the round trip through Kubernetes; and the bridge's
reading of bound and foreign pods."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidal_bridge.pods import read_pod
from tidal_schemas import GpuShare, PlacementDecision
from tidal_schemas.decision_codec import DECISION_ID, GPUS, NUMA_CPUS, read_decision, write_decision

from test_bridge_annotations import container, make_pod

names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=40)
shares = st.lists(st.builds(GpuShare, gpu=names, milli=st.integers(1, 1000), model=st.sampled_from(["", "A100"])),
                  max_size=8, unique_by=lambda s: s.gpu)


@given(decision_id=names, numa=st.dictionaries(st.integers(0, 64), st.integers(1, 256), max_size=8), gpus=shares)
def test_what_is_written_reads_back_the_same(decision_id, numa, gpus):
    decision = PlacementDecision(decision_id=decision_id, namespace="ns", name="p", outcome="placed", node="n1",
                                 numa_cpus=numa, gpus=gpus)
    held, problem = read_decision(write_decision(decision))
    assert problem is None
    assert (held.decision_id, held.numa_cpus, list(held.gpus)) == (decision_id, numa, gpus)


def test_written_form_is_compact_json_sorted_by_numa():
    decision = PlacementDecision(decision_id="d1", namespace="ns", name="p", outcome="placed", node="n1",
                                 numa_cpus={1: 2, 0: 2}, gpus=[GpuShare(gpu="gpu-0", milli=500, model="A100")])
    assert write_decision(decision) == {DECISION_ID: "d1", NUMA_CPUS: '{"0":2,"1":2}',
                                        GPUS: '[{"gpu":"gpu-0","milli":500,"model":"A100"}]'}


def test_a_pod_without_a_decision_reads_as_none_and_no_problem():
    assert read_decision({"other": "x"}) == (None, None)
    assert read_decision(None) == (None, None)


@pytest.mark.parametrize("annotations, says", [
    ({DECISION_ID: "d", NUMA_CPUS: "{}"}, "tidal.dev/gpus missing"),
    ({DECISION_ID: "d", NUMA_CPUS: "{", GPUS: "[]"}, "numa-cpus: is not JSON"),
    ({DECISION_ID: "d", NUMA_CPUS: '{"x": 1}', GPUS: "[]"}, "not a whole number"),
    ({DECISION_ID: "d", NUMA_CPUS: '{"0": -1}', GPUS: "[]"}, "CPUs on NUMA 0"),
    ({DECISION_ID: "d", NUMA_CPUS: '{"0": 1.5}', GPUS: "[]"}, "CPUs on NUMA 0"),
    ({DECISION_ID: "d", NUMA_CPUS: "{}", GPUS: '[{"gpu": "g", "milli": 2000}]'}, "gpus: has an invalid entry"),
    ({DECISION_ID: "d", NUMA_CPUS: "{}", GPUS: '[{"gpu": "g", "milli": 1}, {"gpu": "g", "milli": 1}]'},
     "names a GPU twice"),
    ({DECISION_ID: "d", NUMA_CPUS: "{}", GPUS: json.dumps([{"gpu": "g", "milli": 1}] * 2000)}, "at most 1024"),
    ({DECISION_ID: "", NUMA_CPUS: "{}", GPUS: "[]"}, "decision-id: not a name"),
])
def test_a_malformed_decision_is_a_problem_never_a_crash(annotations, says):
    held, problem = read_decision(annotations)
    assert held is None and says in problem


def _decided(gpus='[{"gpu":"gpu1","milli":1000,"model":"A100"}]', numa='{"0":2}'):
    return {DECISION_ID: "d-7", NUMA_CPUS: numa, GPUS: gpus, "tidal.dev/exclusive-cpus": "true",
            "tidal.dev/gpu-count": "1"}


def test_a_bound_tidal_pod_carries_what_it_holds():
    pod, unread = read_pod(make_pod(node="n1", phase="Running", annotations=_decided(),
                                    containers=[container(cpu="2")]))
    assert unread is None and pod.invalid_reason is None
    assert (pod.decision_id, pod.numa_cpus, pod.gpus) == ("d-7", {0: 2}, [GpuShare(gpu="gpu1", milli=1000,
                                                                                     model="A100")])


def test_a_pending_pod_keeps_no_holdings_even_with_a_decision_written():
    pod, unread = read_pod(make_pod(annotations=_decided(), containers=[container(cpu="2")]))
    assert unread is None and (pod.numa_cpus, pod.gpus, pod.decision_id) == ({}, [], "")


def test_a_bound_pod_whose_decision_is_unreadable_is_accounted_by_requests_and_reported():
    pod, unread = read_pod(make_pod(node="n1", annotations=_decided(gpus="oops"), containers=[container(cpu="2")]))
    assert (pod.numa_cpus, pod.gpus, pod.gpu.count, pod.exclusive_cpus) == ({}, [], 1, True)
    assert "gpus: is not JSON" in unread and "accounted by its requests" in unread


def test_a_bound_gpu_pod_without_any_decision_is_reported():
    annotations = {"tidal.dev/gpu-count": "2"}
    pod, unread = read_pod(make_pod(node="n1", annotations=annotations))
    assert pod.gpu.count == 2 and unread.startswith("bound without a Tidal decision")
    plain, nothing = read_pod(make_pod(node="n1"))
    assert nothing is None and plain.requests.cpu_milli == 1000


def test_a_pod_of_another_scheduler_is_foreign_and_counted_by_its_requests():
    daemon = make_pod("agent", node="n1", phase="Running", schedulerName="default-scheduler",
                      annotations={"tidal.dev/gpu-count": "junk", "tidal.dev/exclusive-cpus": "true"},
                      containers=[container(cpu="500m", memory="1Gi", limits={"nvidia.com/gpu": "1"})])
    pod, unread = read_pod(daemon)
    assert pod.foreign and unread is None and pod.invalid_reason is None  # not our asks: not read
    assert (pod.requests.cpu_milli, pod.requests.memory_mib, pod.gpu.count, pod.exclusive_cpus) == (500, 1024, 1, False)
    unnamed = make_pod("static", node="n1", containers=[container()])
    del unnamed["spec"]["schedulerName"]
    assert read_pod(unnamed)[0].foreign  # the API server's default is default-scheduler
