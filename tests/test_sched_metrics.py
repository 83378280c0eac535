"""What the scheduling metrics compute, table-driven: the reason category of
a pending pod, GPU use per model from the cache's device arrays, the
pending-to-bound clock, and oversell's per-pool sums."""

from __future__ import annotations

import numpy as np
import pytest

from tidal_oversell.pool_metrics import MIB, pool_totals
from tidal_placement.sched_metrics import REASONS, GpuModelUse, PendingClock, gpu_use_by_model, pending_reason
from tidal_schemas import Resources

STALE = "stale: no metrics for 30s"


def _reason(reason="", filtered=None, refused=False, invalid=False, held_back=False) -> str:
    return pending_reason(reason=reason, filtered=filtered or {}, refused=refused, invalid=invalid,
                          held_back=held_back, stale_stage=STALE)


@pytest.mark.parametrize("kwargs, expected", [
    (dict(), "new"),                                                       # not tried yet
    (dict(invalid=True, refused=True, reason="invalid pod: x"), "invalid"),  # invalid first
    (dict(held_back=True, reason="waiting behind a higher-priority cpu pod"), "waiting"),
    (dict(refused=True, reason="quota: tenant t gpu 1000 + 1000 > limit 1000"), "quota"),
    (dict(refused=True, reason="permission: tenant t may use no GPU the pod asks for"), "permission"),
    (dict(reason="0/5 nodes fit: 5 cpu", filtered={"cpu": 5}), "cpu"),
    (dict(reason="…", filtered={"cpu": 1, "memory": 4}), "memory"),          # the stage counting out most
    (dict(reason="…", filtered={"gpu-model": 2, "gpu": 2}), "gpu-model"),    # a tie: the earlier stage
    (dict(reason="…", filtered={"no-exclusive-cpus": 3}), "numa"),
    (dict(reason="…", filtered={"numa": 3}), "numa"),
    (dict(reason="…", filtered={"not-permitted": 3}), "permission"),
    (dict(reason="…", filtered={"stop-scheduling taint": 3, "cpu": 1}), "taint"),
    (dict(reason="…", filtered={STALE: 3}), "stale"),
    (dict(reason="no group of tenant t has 2 free GPUs"), "gpu-group"),
])
def test_pending_reason(kwargs, expected):
    assert _reason(**kwargs) == expected
    assert expected in REASONS


def test_gpu_use_by_model():
    # row 0: 2 A100 (one free, one with 250 free); row 1: one H100 fully held, one unhealthy pad;
    # row 2: absent (a removed node) with a free A100 that must not count
    valid = np.array([[True, True], [True, False], [True, False]])
    free = np.array([[1000, 250], [0, 0], [1000, 0]])
    model = np.array([[0, 0], [1, -1], [0, -1]])
    present = np.array([True, True, False])
    use = gpu_use_by_model(valid, free, model, present, ["A100", "H100"])
    # A100: capacity 2·1000; allocated (0 + 750); fragmented: 250 on the partly used one
    assert use == {"A100": GpuModelUse(capacity=2000, allocated=750, fragmented=250),
                   "H100": GpuModelUse(capacity=1000, allocated=1000, fragmented=0)}


def test_pending_clock_counts_from_first_sighting_once():
    clock = PendingClock()
    clock.pending("ns/a", 10.0)
    clock.pending("ns/a", 12.0)  # a newer pending event of the same pod: still from 10
    assert clock.bound("ns/a", 15.5) == 5.5
    assert clock.bound("ns/a", 16.0) is None  # read twice: counted once
    clock.pending("ns/b", 1.0)
    clock.forget("ns/b")  # deleted before it bound
    assert clock.bound("ns/b", 2.0) is None
    assert clock.bound("ns/never-pending", 2.0) is None


def test_pool_totals_sum_granted_and_own_per_pool():
    own = Resources(cpu_milli=8000, memory_mib=1024)
    nodes = [("c1", "default", Resources(cpu_milli=12000, memory_mib=1024), own),
             ("c1", "default", Resources(cpu_milli=8000, memory_mib=512), own),
             ("c1", "gpu", own, own)]
    totals = pool_totals(nodes)
    # default pool: cpu (12 + 8) granted over (8 + 8) own cores; memory (1024 + 512) MiB over 2048 MiB
    assert totals[("c1", "default", "cpu", "core")] == (20.0, 16.0)
    assert totals[("c1", "default", "memory", "byte")] == (1536.0 * MIB, 2048.0 * MIB)
    assert totals[("c1", "gpu", "cpu", "core")] == (8.0, 8.0)
