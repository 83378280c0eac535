"""NUMA load = mean of its CPUs; node load = mean of the NUMA loads (SPEC §E)."""

from __future__ import annotations

import pytest
from builders import T0

from tidal_schemas import Cpu, NodeMetrics, NodeTopology, NumaNode, Resources
from tidal_scoring.load import cpu_to_numa, load_from_metrics, node_load, numa_loads


def topology(*numa_cpus: list[int]) -> NodeTopology:
    """A one-socket node whose NUMA node i holds the CPUs numa_cpus[i]."""
    cpus = [Cpu(cpu=c, core=c, socket=0, numa=n) for n, ids in enumerate(numa_cpus) for c in ids]
    numas = [NumaNode(id=n, cpus=ids) for n, ids in enumerate(numa_cpus)]
    total = 1000 * len(cpus)
    return NodeTopology(node="n1", cpus=cpus, numa_nodes=numas,
                        capacity=Resources(cpu_milli=total), allocatable=Resources(cpu_milli=total))


@pytest.mark.parametrize("cpu_util, mapping, expected_numa, expected_node", [
    # two CPUs each: numa0 = (0.2+0.4)/2 = 0.3, numa1 = (0.9+0.5)/2 = 0.7, node = 0.5
    ({0: 0.2, 1: 0.4, 2: 0.9, 3: 0.5}, {0: 0, 1: 0, 2: 1, 3: 1}, {0: 0.3, 1: 0.7}, 0.5),
    # unequal NUMA sizes: numa0 = 0.9 (one CPU), numa1 = (0.1·3)/3 = 0.1;
    # node = (0.9 + 0.1)/2 = 0.5, not the CPU-weighted 0.3
    ({0: 0.9, 1: 0.1, 2: 0.1, 3: 0.1}, {0: 0, 1: 1, 2: 1, 3: 1}, {0: 0.9, 1: 0.1}, 0.5),
    # CPU 3 unsampled: numa1 = 0.6 from CPU 2 alone; node = (0.0 + 0.6)/2 = 0.3
    ({0: 0.0, 1: 0.0, 2: 0.6}, {0: 0, 1: 0, 2: 1, 3: 1}, {0: 0.0, 1: 0.6}, 0.3),
    # numa1 has no sample at all: left out, node = numa0 = 0.4
    ({0: 0.4, 1: 0.4}, {0: 0, 1: 0, 2: 1, 3: 1}, {0: 0.4}, 0.4),
    # CPU 9 is not in the mapping: ignored
    ({0: 0.5, 9: 1.0}, {0: 0}, {0: 0.5}, 0.5),
])
def test_numa_and_node_load(cpu_util, mapping, expected_numa, expected_node):
    per_numa = numa_loads(cpu_util, mapping)
    assert per_numa == pytest.approx(expected_numa)
    assert node_load(per_numa) == pytest.approx(expected_node)


def test_node_load_of_nothing_is_unknown_not_zero():
    assert node_load({}) is None


def test_cpu_to_numa_from_topology():
    assert cpu_to_numa(topology([0, 1], [2, 3])) == {0: 0, 1: 0, 2: 1, 3: 1}


def test_cpu_to_numa_falls_back_to_numa_cpu_lists():
    topo = NodeTopology(node="n1", numa_nodes=[NumaNode(id=0, cpus=[0, 1]), NumaNode(id=1, cpus=[2])],
                        capacity=Resources(cpu_milli=3000), allocatable=Resources(cpu_milli=3000))
    assert cpu_to_numa(topo) == {0: 0, 1: 0, 2: 1}


def test_load_from_metrics_recomputes_from_cpus_with_a_topology():
    # numa0 = (0.2+0.6)/2 = 0.4, numa1 = 0.8 (CPU 3 unsampled), numa2 unsampled;
    # node = (0.4+0.8)/2 = 0.6. The agent's own numa_load is not used.
    metrics = NodeMetrics(node="n1", sampled_at=T0, interval_s=10, cpu_util={0: 0.2, 1: 0.6, 2: 0.8, 7: 0.9},
                          numa_load={0: 0.99})
    report = load_from_metrics(metrics, topology([0, 1], [2, 3], [4, 5]))
    assert report.source == "cpus"
    assert report.numa_load == pytest.approx({0: 0.4, 1: 0.8})
    assert report.load == pytest.approx(0.6)
    assert report.unmapped_cpus == [7]
    assert report.unsampled_numa == [2]


def test_load_from_metrics_uses_agent_numa_figures_without_cpus():
    # node = (0.2 + 0.5)/2 = 0.35
    metrics = NodeMetrics(node="n1", sampled_at=T0, interval_s=10, numa_load={1: 0.5, 0: 0.2})
    report = load_from_metrics(metrics, topology([0], [1]))
    assert report.source == "numa"
    assert list(report.numa_load) == [0, 1]
    assert report.load == pytest.approx(0.35)


def test_load_from_metrics_with_no_figures_has_no_load():
    report = load_from_metrics(NodeMetrics(node="n1", sampled_at=T0, interval_s=10))
    assert report.load is None and report.numa_load == {}
