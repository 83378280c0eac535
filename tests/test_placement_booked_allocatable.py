"""What placement books a node's CPU and memory against: oversell's figure,
bounded by the node's status.allocatable once the bridge reported it
(booked_allocatable.py), whatever order the three streams are read in."""

from __future__ import annotations

import itertools

import pytest

from builders import pod
from tidal_cli.sample import node
from tidal_placement.booked_allocatable import booked
from tidal_placement.cache import ClusterCache
from tidal_placement.cycle import cycle
from tidal_schemas import NodeAllocatable, NodeAllocatables, NodeStatus, Resources

GIB = 1024


def res(cpu_milli: int, memory_mib: int = 64 * GIB) -> Resources:
    return Resources(cpu_milli=cpu_milli, memory_mib=memory_mib)


@pytest.mark.parametrize("oversold, status, expected", [
    # (cpu_milli, memory_mib); the node agent's own figure is (4000, 64 GiB)
    (None, None, (4000, 64 * GIB)),                        # only the node agent's own figure
    ((6000, 64 * GIB), None, (6000, 64 * GIB)),            # no bridge: oversell's figure, as before
    (None, (5000, 64 * GIB), (5000, 64 * GIB)),            # oversell said nothing: the status alone
    ((6000, 64 * GIB), (4000, 64 * GIB), (4000, 64 * GIB)),  # the webhook down: the kubelet's figure bounds it
    ((6000, 64 * GIB), (6000, 64 * GIB), (6000, 64 * GIB)),  # the webhook wrote oversell's figure
    ((5000, 64 * GIB), (6000, 64 * GIB), (5000, 64 * GIB)),  # oversell lowered its figure: booked before the status
    ((6000, 32 * GIB), (4000, 64 * GIB), (4000, 32 * GIB)),  # per resource
    ((6000, 64 * GIB), (0, 0), (0, 0)),                    # the Node object gone: nothing admitted there
])
def test_the_rule(oversold, status, expected):
    assert booked((4000, 64 * GIB), oversold, status) == expected


def topology():
    return node("n1", 1, 2, 2, 1, 64 * GIB, reserved=0)  # 4 CPUs, 64 GiB


def oversold(cpu_milli: int) -> NodeAllocatables:
    return NodeAllocatables.of(NodeAllocatable(node="n1", policy="factor", capacity=res(4000),
                                               allocatable=res(cpu_milli)))


def status(cpu_milli: int) -> NodeStatus:
    return NodeStatus(node="n1", allocatable=res(cpu_milli))


EVENTS = {"topology": topology(), "oversold": oversold(6000), "status": status(4000)}


@pytest.mark.parametrize("order", list(itertools.permutations(EVENTS)), ids="-".join)
def test_any_order_of_the_streams_books_the_same(order):
    """A rebuild reads each stream on its own: the node's topology, oversell's
    figure and the node's status may come in any order, the books are the same."""
    cache = ClusterCache("c1", permit_timeout_s=60.0, stale_after_s=0.0)
    for name in order:
        cache.apply(EVENTS[name], 0.0)
    assert cache.state.allocatable("n1") == res(4000)


def test_a_topology_read_again_keeps_the_booked_figure():
    cache = ClusterCache("c1", permit_timeout_s=60.0, stale_after_s=0.0)
    for event in (topology(), oversold(6000), status(5000), topology()):
        cache.apply(event, 0.0)
    assert cache.state.allocatable("n1") == res(5000)


def placements(cache: ClusterCache, now: float) -> list[tuple[str, str]]:
    return [(d.name, d.outcome) for d in cycle(cache, None, now)]


def test_oversold_room_is_booked_only_once_the_status_carries_it():
    cache = ClusterCache("c1", permit_timeout_s=3600.0, stale_after_s=0.0)
    for event in (topology(), status(4000), oversold(6000)):
        cache.apply(event, 0.0)
    cache.apply(pod("big", cpu_milli=5000), 0.0)
    # 5000 > the kubelet's 4000, though oversell allows 6000: the kubelet would refuse it
    assert placements(cache, 1.0) == [("big", "pending")]
    assert cache.apply(status(6000), 2.0) is True  # the webhook wrote the oversold figure: room grew
    assert placements(cache, 3.0) == [("big", "placed")]


def test_a_status_that_only_shrinks_or_stays_wakes_no_one():
    cache = ClusterCache("c1", permit_timeout_s=3600.0, stale_after_s=0.0)
    for event in (topology(), oversold(6000), status(6000)):
        cache.apply(event, 0.0)
    cache.room_changed = False
    assert cache.apply(status(6000), 1.0) is False
    assert cache.apply(status(4000), 1.0) is False and not cache.room_changed
    assert cache.state.allocatable("n1") == res(4000)
    assert cache.apply(NodeStatus(node="n1", deleted=True), 2.0) is False
    assert cache.state.allocatable("n1") == res(0, 0)
    assert cache.apply(pod("any", cpu_milli=100), 2.0) and placements(cache, 3.0) == [("any", "pending")]


def test_a_status_for_a_node_not_known_yet_is_booked_when_it_arrives():
    cache = ClusterCache("c1", permit_timeout_s=3600.0, stale_after_s=0.0)
    assert cache.apply(status(3000), 0.0) is False  # no node to fit anything on yet
    cache.apply(topology(), 1.0)
    assert cache.state.allocatable("n1") == res(3000)
