"""§A capacity and allocatable of the node report, on the four fixture machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidal_schemas import Gpu, NodeTopology, decode, encode, make_envelope
from tidal_topology.inventory import build_node_topology
from tidal_topology.sysfs import read_topology

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sysfs"

CASES = [
    # (fixture, reserved, per-NUMA capacity, per-NUMA allocatable, allocatable cpu_milli)
    # 8 cpus, reserve core 0 = {0, 4}: numa0 8 - 2 = 6; 1000 x (8 - 2)
    ("single_socket_ht", {0, 4}, {0: 8}, {0: 6}, 6000),
    # 16 cpus, reserve {0, 8} (core 0, numa0): 8 - 2 = 6 and 8; 1000 x 14
    ("dual_socket_ht", {0, 8}, {0: 8, 1: 8}, {0: 6, 1: 8}, 14000),
    # reserve one thread on each NUMA node: cpu 0 (numa0) and cpu 12 (numa1)
    ("dual_socket_ht", {0, 12}, {0: 8, 1: 8}, {0: 7, 1: 7}, 14000),
    # 32 cpus, 4 NUMA of 8; reserve {0, 16} (numa0) and {20} (numa1): 5, 7, 8, 8; 1000 x 29
    ("dual_socket_multi_numa_ht", {0, 16, 20}, {0: 8, 1: 8, 2: 8, 3: 8}, {0: 6, 1: 7, 2: 8, 3: 8}, 29000),
    # 8 cpus no HT; reserve {0, 1} on numa0: 2 and 4; 1000 x 6
    ("dual_socket_no_ht", {0, 1}, {0: 4, 1: 4}, {0: 2, 1: 4}, 6000),
    # nothing reserved: allocatable = capacity
    ("dual_socket_no_ht", set(), {0: 4, 1: 4}, {0: 4, 1: 4}, 8000),
]


@pytest.mark.parametrize("fixture, reserved, capacity, allocatable, alloc_milli", CASES)
def test_capacity_and_allocatable_with_reserved_cpus(fixture, reserved, capacity, allocatable, alloc_milli):
    machine = read_topology(FIXTURES / fixture)
    report = build_node_topology(machine, "n1", reserved_cpus=reserved, exclusive_cpus=True)
    assert {n.id: n.capacity_cpus for n in report.numa_nodes} == capacity
    assert {n.id: n.allocatable_cpus for n in report.numa_nodes} == allocatable
    assert report.capacity.cpu_milli == 1000 * len(machine.cpus)
    assert report.allocatable.cpu_milli == alloc_milli
    assert report.reserved_cpus == sorted(reserved)
    assert [c.cpu for c in report.cpus] == [c.cpu for c in machine.cpus]
    assert all(n.memory_mib == 16384 for n in report.numa_nodes)
    assert report.capacity.memory_mib == 16384 * len(capacity)


def test_without_exclusive_cpus_no_per_numa_cpu_figures():
    # §A: a node that does not offer exclusive CPUs reports no per-NUMA CPU counts
    machine = read_topology(FIXTURES / "dual_socket_ht")
    report = build_node_topology(machine, "n1", reserved_cpus={0}, exclusive_cpus=False)
    assert all(n.capacity_cpus is None and n.allocatable_cpus is None for n in report.numa_nodes)
    assert report.allocatable.cpu_milli == 15000  # node-level reservation still applies
    assert [n.cpus for n in report.numa_nodes] == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]


def gpu(id: str, kind: str = "physical", parent: str | None = None, healthy: bool = True) -> Gpu:
    return Gpu(id=id, model="A100", kind=kind, parent=parent, memory_mib=40960, healthy=healthy)


GPU_CASES = [
    # (gpus, capacity gpu_milli, allocatable gpu_milli)
    ([], 0, 0),
    ([gpu("g0"), gpu("g1")], 2000, 2000),
    # MIG slices are shares of g0, not extra capacity
    ([gpu("g0"), gpu("g0-mig1", "virtual", "g0"), gpu("g0-mig2", "virtual", "g0")], 1000, 1000),
    # an unhealthy GPU is capacity but not allocatable
    ([gpu("g0"), gpu("g1", healthy=False)], 2000, 1000),
]


@pytest.mark.parametrize("gpus, capacity, allocatable", GPU_CASES)
def test_gpu_capacity(gpus, capacity, allocatable):
    machine = read_topology(FIXTURES / "single_socket_ht")
    report = build_node_topology(machine, "n1", gpus=gpus)
    assert report.capacity.gpu_milli == capacity
    assert report.allocatable.gpu_milli == allocatable
    assert report.gpus == gpus


def test_memory_override_and_reservation():
    machine = read_topology(FIXTURES / "single_socket_ht")
    report = build_node_topology(machine, "n1", memory_mib=64000, reserved_memory_mib=2000)
    assert report.capacity.memory_mib == 64000
    assert report.allocatable.memory_mib == 62000


@pytest.mark.parametrize("kwargs, message", [
    ({"reserved_cpus": {99}}, r"reserved cpus \[99\]"),
    ({"reserved_memory_mib": 20000}, "reserved memory 20000"),
    ({"reserved_memory_mib": -1}, "reserved memory -1"),
])
def test_bad_reservations_are_refused(kwargs, message):
    machine = read_topology(FIXTURES / "single_socket_ht")
    with pytest.raises(ValueError, match=message):
        build_node_topology(machine, "n1", **kwargs)


def test_report_survives_the_wire():
    machine = read_topology(FIXTURES / "dual_socket_multi_numa_ht")
    report = build_node_topology(machine, "n1", reserved_cpus={0, 16}, exclusive_cpus=True,
                                 gpus=[gpu("g0")], labels={"zone": "a"})
    envelope = make_envelope(report, cluster="c1", source="test")
    decoded = decode(encode(envelope))
    assert isinstance(decoded.payload, NodeTopology)
    assert decoded.payload == report
    assert decoded.payload.sockets == [0, 1]
