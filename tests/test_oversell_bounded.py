"""Bounded allocatable (SPEC §D, seed 004); NUMA nodes are never oversold."""

from __future__ import annotations

import pytest

from tidal_oversell.bounded import (
    BoundedSettings,
    bounded_allocatable,
    bounded_node_allocatable,
)
from tidal_schemas import Resources


def test_worked_example_goes_to_the_floor():
    # 100 CPUs, 1 allocated, 10 used → 100 · 1/10 = 10 → floor 0.8 · 100 = 80
    result = bounded_allocatable(capacity=100, allocated_total=1, used_total=10,
                                 allocated_ls=1, used_ls=10, load=0.2, threshold=0.75)
    assert result.allocatable == 80
    assert result.chosen == "floor"
    assert result.terms["capacity*allocated/used"] == 10
    assert result.policy == "bounded"
    assert result.inputs["allocated_total"] == 1 and result.inputs["used_total"] == 10
    assert "= 80 from floor" in result.reason


CASES = [
    # id, (capacity, alloc, used, alloc_ls, used_ls, load), expected, chosen
    # load 0.9 > 0.75: no oversell
    ("load above threshold", (100, 50, 10, 40, 5, 0.9), 100, "capacity"),
    # load == threshold is not above it: formula; min(150, 500, 800) = 150
    ("load at threshold", (100, 50, 10, 40, 5, 0.75), 150, "w*capacity"),
    # min(150, 100·60/50 = 120, 100·40/30 = 133.3) = 120
    ("total ratio wins", (100, 60, 50, 40, 30, 0.5), 120, "capacity*allocated/used"),
    # min(150, 120, 100·45/40 = 112.5) = 112.5
    ("LS ratio wins", (100, 60, 50, 45, 40, 0.5), 112.5, "capacity*allocated_ls/used_ls"),
    # min(150, 100·90/100 = 90, 100·85/100 = 85) = 85 ≥ floor 80
    ("just above the floor", (100, 90, 100, 85, 100, 0.5), 85, "capacity*allocated_ls/used_ls"),
    # nothing used: both ratios skipped → w·capacity = 150
    ("nothing used", (100, 30, 0, 10, 0, 0.1), 150, "w*capacity"),
    # LS unused: skipped; min(150, 100·30/20 = 150) — tie goes to w·capacity
    ("LS unused, tie", (100, 30, 20, 0, 0, 0.1), 150, "w*capacity"),
    # nothing allocated but something used: 0 → floor 80
    ("nothing allocated", (100, 0, 20, 0, 20, 0.1), 80, "floor"),
]


@pytest.mark.parametrize("args, expected, chosen", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bounded_allocatable(args, expected, chosen):
    capacity, alloc, used, alloc_ls, used_ls, load = args
    result = bounded_allocatable(capacity, alloc, used, alloc_ls, used_ls, load, threshold=0.75)
    assert result.allocatable == pytest.approx(expected)
    assert result.chosen == chosen
    assert chosen in result.reason


def test_skipped_terms_are_named():
    result = bounded_allocatable(100, 30, 0, 10, 0, 0.1)
    assert result.skipped == ["capacity*allocated/used", "capacity*allocated_ls/used_ls"]
    assert "skipped, used = 0" in result.reason
    assert set(result.terms) == {"w*capacity", "floor"}


@pytest.mark.parametrize("ls, w, floor_fraction, expected, chosen", [
    # LS unused; min(w·100 = 110, 100·60/50 = 120) = 110
    ((0, 0), 1.1, 0.8, 110, "w*capacity"),
    # floor 0.95·100 = 95 above min(150, 120, 100·45/50 = 90) = 90
    ((45, 50), 1.5, 0.95, 95, "floor"),
    # the default floor 80 is below 90: the LS term stands
    ((45, 50), 1.5, 0.8, 90, "capacity*allocated_ls/used_ls"),
])
def test_w_and_floor_are_settings(ls, w, floor_fraction, expected, chosen):
    result = bounded_allocatable(100, 60, 50, *ls, 0.5, w=w, floor_fraction=floor_fraction)
    assert result.allocatable == pytest.approx(expected)
    assert result.chosen == chosen


@pytest.mark.parametrize("kwargs", [
    {"w": 1.0}, {"w": 0.5}, {"floor_fraction": 0.4}, {"floor_fraction": 1.1}, {"threshold": 0.0},
])
def test_bad_settings_are_rejected(kwargs):
    with pytest.raises(ValueError):
        BoundedSettings(**kwargs)
    with pytest.raises(ValueError):
        bounded_allocatable(100, 1, 10, 1, 10, 0.2, **kwargs)


def test_node_allocatable_per_resource_gpu_untouched():
    capacity = Resources(cpu_milli=100_000, memory_mib=262_144, gpu_milli=8000)
    # cpu: 100000 · 1000/10000 = 10000 → floor 80000
    # memory: min(1.5·262144 = 393216, 262144·131072/100000 = 343597.38) → 343597 (rounded down)
    node = bounded_node_allocatable(
        capacity,
        allocated=Resources(cpu_milli=1000, memory_mib=131_072),
        used=Resources(cpu_milli=10_000, memory_mib=100_000),
        allocated_ls=Resources(), used_ls=Resources(),
        load=0.3)
    assert node.allocatable == Resources(cpu_milli=80_000, memory_mib=343_597, gpu_milli=8000)
    assert node.cpu.chosen == "floor"
    assert node.memory.chosen == "capacity*allocated/used"
    inputs = node.inputs()
    assert inputs["cpu.used_total"] == 10_000 and inputs["memory.term.floor"] == pytest.approx(209_715.2)
    assert node.reason.startswith("cpu: ") and "; memory: " in node.reason


def test_node_allocatable_under_load_is_capacity():
    capacity = Resources(cpu_milli=8000, memory_mib=16384)
    node = bounded_node_allocatable(capacity, Resources(cpu_milli=100), Resources(cpu_milli=7000),
                                    Resources(), Resources(), load=0.9)
    assert node.allocatable == capacity
    assert node.cpu.chosen == node.memory.chosen == "capacity"


