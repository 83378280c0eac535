"""§E usage: per-CPU utilisation from /proc/stat, NUMA/node load, memory, pod
usage from cgroup v1 and v2 trees written by the tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import patience
from tidal_topology.cpuset import parse_cpuset
from tidal_topology.usage import (
    CpuTimes,
    PodCounters,
    PodSample,
    cpu_used_milli,
    cpu_utilisation,
    node_load,
    numa_loads,
    parse_meminfo,
    parse_proc_stat,
    pod_usage,
    read_meminfo,
    read_pod_counters,
    read_proc_stat,
)

STAT_BEFORE = """cpu  500 0 300 2000 100 0 0 0 0 0
cpu0 100 0 100 1000 0 0 0 0 0 0
cpu1 400 0 200 1000 100 0 0 0 0 0
intr 12345 0 0
ctxt 999
cpu3 0 0 0 0 0 0 0 0 0 0
"""
# Δ cpu0: user 300 system 0 idle 100 -> total 400, idle 100 -> 1 - 100/400 = 0.75
# Δ cpu1: idle 50 iowait 50 steal 100 -> total 200, idle+iowait 100 -> 0.5
STAT_AFTER = """cpu  800 0 300 2150 150 0 0 100 0 0
cpu0 400 0 100 1100 0 0 0 0 50 0
cpu1 400 0 200 1050 150 0 0 100 0 0
cpu3 0 0 0 0 0 0 0 0 0 0
"""


def test_parse_proc_stat_reads_cpu_lines_only():
    stat = parse_proc_stat(STAT_BEFORE)
    assert stat == {0: CpuTimes(idle=1000, total=1200), 1: CpuTimes(idle=1100, total=1700),
                    3: CpuTimes(idle=0, total=0)}


def test_utilisation_from_two_snapshots():
    util = cpu_utilisation(parse_proc_stat(STAT_BEFORE), parse_proc_stat(STAT_AFTER))
    # guest (50 on cpu0) is inside user already and not added again
    assert util == {0: 0.75, 1: 0.5, 3: 0.0}  # cpu3: Δtotal = 0 -> 0


UTIL_CASES = [
    # (before, after, expected)
    (CpuTimes(0, 0), CpuTimes(0, 100), 1.0),  # no idle at all
    (CpuTimes(0, 0), CpuTimes(100, 100), 0.0),  # all idle
    (CpuTimes(10, 10), CpuTimes(10, 10), 0.0),  # Δtotal = 0
    (CpuTimes(100, 200), CpuTimes(50, 100), 0.0),  # counters went back (CPU hot-replugged): Δtotal < 0
    (CpuTimes(0, 0), CpuTimes(150, 100), 0.0),  # idle grew more than total: clamped to 0
    (CpuTimes(50, 0), CpuTimes(0, 100), 1.0),  # idle went back: clamped to 1
]


@pytest.mark.parametrize("before, after, expected", UTIL_CASES)
def test_utilisation_edges(before, after, expected):
    assert cpu_utilisation({0: before}, {0: after}) == {0: expected}


def test_cpus_in_only_one_snapshot_are_skipped():
    assert cpu_utilisation({0: CpuTimes(0, 0)}, {1: CpuTimes(0, 10)}) == {}


def test_numa_and_node_load():
    util = {0: 0.2, 1: 0.4, 2: 0.9, 3: 0.7, 4: 0.1}
    loads = numa_loads(util, {0: [0, 1], 1: [2, 3, 4], 2: [8, 9]})
    # numa0 = (0.2 + 0.4) / 2 = 0.3; numa1 = (0.9 + 0.7 + 0.1) / 3 = 0.5666…; numa2 unmeasured
    assert loads == pytest.approx({0: 0.3, 1: 1.7 / 3})
    # node = mean of NUMA loads = (0.3 + 0.5666…) / 2, not the mean over CPUs (0.46)
    assert node_load(loads) == pytest.approx((0.3 + 1.7 / 3) / 2)
    assert node_load({}) == 0.0
    # 1000 x (0.2 + 0.4 + 0.9 + 0.7 + 0.1) = 2300
    assert cpu_used_milli(util) == 2300


def test_real_proc_stat_twice():
    before = read_proc_stat()
    online = parse_cpuset(Path("/sys/devices/system/cpu/online").read_text())
    assert sorted(before) == online
    # spin until every CPU's counters have moved (USER_HZ ticks), bounded
    deadline = time.monotonic() + patience(5.0)
    while True:
        after = read_proc_stat()
        if all(after[c].total > before[c].total for c in online) or time.monotonic() > deadline:
            break
        sum(range(20000))  # keep this CPU busy between reads
    assert all(after[c].total > before[c].total for c in online), "no tick elapsed within 5 s"
    util = cpu_utilisation(before, after)
    assert sorted(util) == online
    assert all(0.0 <= u <= 1.0 for u in util.values())
    assert sum(util.values()) > 0  # this test itself was spinning on one of them


MEMINFO = """MemTotal:        4548824 kB
MemFree:         1000000 kB
MemAvailable:    2048000 kB
Buffers:          100000 kB
Cached:           500000 kB
HugePages_Total:       0
"""


def test_meminfo_used_is_total_minus_available():
    mem = parse_meminfo(MEMINFO)
    # 4548824 kB // 1024 = 4442 MiB; 2048000 kB = 2000 MiB; used = 2442
    assert (mem.total_mib, mem.available_mib, mem.used_mib) == (4442, 2000, 2442)


def test_meminfo_without_memavailable_uses_free_buffers_cached():
    old_kernel = "\n".join(line for line in MEMINFO.splitlines() if not line.startswith("MemAvailable"))
    # (1000000 + 100000 + 500000) kB // 1024 = 1562 MiB
    assert parse_meminfo(old_kernel).available_mib == 1562


def test_meminfo_without_total_is_an_error():
    with pytest.raises(ValueError, match="MemTotal"):
        parse_meminfo("MemFree: 1 kB\n")


def test_read_meminfo_from_a_procfs_root(tmp_path):
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "stat").write_text(STAT_AFTER)
    assert read_meminfo(tmp_path).used_mib == 2442
    assert set(read_proc_stat(tmp_path)) == {0, 1, 3}


def test_real_meminfo():
    mem = read_meminfo()
    assert 0 < mem.used_mib < mem.total_mib


# ---------------------------------------------------------------- pods ------

UID_A = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
UID_B = "11111111-2222-3333-4444-555555555555"
UID_STATIC = "6f1e2d3c4b5a69788796a5b4c3d2e1f0"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def cgroup_v1(root: Path, pods: dict[str, tuple[str, int, int]]) -> None:
    """pods: uid -> (qos dir or '', cpuacct.usage ns, memory.usage_in_bytes)."""
    for uid, (qos, cpu_ns, mem) in pods.items():
        rel = Path("kubepods") / qos / f"pod{uid}"
        write(root / "cpuacct" / rel / "cpuacct.usage", f"{cpu_ns}\n")
        write(root / "memory" / rel / "memory.usage_in_bytes", f"{mem}\n")
        # a container cgroup inside the pod is not a pod
        write(root / "cpuacct" / rel / "c0ffee" / "cpuacct.usage", "1\n")


def test_pod_usage_cgroup_v1(tmp_path):
    cgroup_v1(tmp_path, {UID_A: ("burstable", 1_000_000_000, 300 * 1024 * 1024),
                         UID_B: ("", 0, 64 * 1024 * 1024)})
    clock = iter([10_000_000_000, 12_000_000_000]).__next__
    before = read_pod_counters(tmp_path, clock=clock)
    cgroup_v1(tmp_path, {UID_A: ("burstable", 2_500_000_000, 310 * 1024 * 1024),
                         UID_B: ("", 500_000_000, 64 * 1024 * 1024),
                         UID_STATIC: ("besteffort", 7, 1024 * 1024)})
    after = read_pod_counters(tmp_path, clock=clock)
    assert after.cpu_ns == {UID_A: 2_500_000_000, UID_B: 500_000_000, UID_STATIC: 7}
    # A: 1.5 s CPU over 2 s wall -> 750 milli; B: 0.5 s / 2 s -> 250; static pod is new -> None
    assert pod_usage(before, after) == sorted([
        PodSample(UID_A, 750, 310), PodSample(UID_B, 250, 64), PodSample(UID_STATIC, None, 1)],
        key=lambda s: s.uid)


def cgroup_v2(root: Path, parent: str, pods: dict[str, tuple[str, int, int]]) -> None:
    """systemd driver layout; pods: uid -> (qos or '', usage_usec, memory.current)."""
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    for uid, (qos, usec, mem) in pods.items():
        slice_uid = uid.replace("-", "_")
        if qos:
            rel = Path(parent) / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{slice_uid}.slice"
        else:
            rel = Path(parent) / f"kubepods-pod{slice_uid}.slice"
        write(root / rel / "cpu.stat", f"usage_usec {usec}\nuser_usec {usec // 2}\nsystem_usec 0\n")
        write(root / rel / "memory.current", f"{mem}\n")


def test_pod_usage_cgroup_v2_systemd_driver(tmp_path):
    cgroup_v2(tmp_path, "kubepods.slice", {UID_A: ("burstable", 1_000_000, 200 * 1024 * 1024),
                                           UID_B: ("", 0, 0)})
    clock = iter([0, 4_000_000_000]).__next__
    before = read_pod_counters(tmp_path, parent="kubepods.slice", version="v2", clock=clock)
    cgroup_v2(tmp_path, "kubepods.slice", {UID_A: ("burstable", 3_000_000, 200 * 1024 * 1024),
                                           UID_B: ("", 4_000_000, 8 * 1024 * 1024)})
    after = read_pod_counters(tmp_path, parent="kubepods.slice", version="v2", clock=clock)
    # A: 2 s CPU over 4 s -> 500 milli; B: 4 s over 4 s -> 1000 milli
    assert pod_usage(before, after) == sorted([PodSample(UID_A, 500, 200), PodSample(UID_B, 1000, 8)],
                                              key=lambda s: s.uid)


POD_USAGE_CASES = [
    # (before cpu_ns, after cpu_ns, wall ns, expected cpu_milli)
    (0, 1_000_000_000, 1_000_000_000, 1000),  # one whole CPU
    (0, 3_000_000_000, 1_000_000_000, 3000),  # three CPUs
    (5, 5, 1_000_000_000, 0),  # idle
    (2_000, 1_000, 1_000_000_000, None),  # counter reset (cgroup re-created)
    (0, 1_000, 0, None),  # no wall time elapsed
]


@pytest.mark.parametrize("before_ns, after_ns, wall, expected", POD_USAGE_CASES)
def test_pod_cpu_rate(before_ns, after_ns, wall, expected):
    before = PodCounters(0, {UID_A: before_ns}, {})
    after = PodCounters(wall, {UID_A: after_ns}, {UID_A: 3 * 1024 * 1024})
    assert pod_usage(before, after) == [PodSample(UID_A, expected, 3)]


def test_missing_parent_or_vanished_files_give_no_pods(tmp_path):
    assert read_pod_counters(tmp_path, clock=lambda: 1).cpu_ns == {}
    (tmp_path / "cpuacct/kubepods" / f"pod{UID_A}").mkdir(parents=True)  # files gone mid-delete
    assert read_pod_counters(tmp_path, clock=lambda: 1) == PodCounters(1, {}, {})


def test_symlinked_pod_dirs_outside_the_root_are_not_read(tmp_path):
    outside = tmp_path / "outside"
    write(outside / "cpuacct.usage", "42\n")
    root = tmp_path / "cg"
    (root / "cpuacct/kubepods").mkdir(parents=True)
    os.symlink(outside, root / "cpuacct/kubepods" / f"pod{UID_A}")
    assert read_pod_counters(root, clock=lambda: 1).cpu_ns == {}


def test_hostile_parent_reads_nothing(tmp_path):
    cgroup_v1(tmp_path / "cg", {UID_A: ("", 5, 5)})
    for parent in ("../cg/cpuacct/kubepods", "/etc", "kubepods/../..", ""):
        assert read_pod_counters(tmp_path / "cg", parent=parent, clock=lambda: 1).cpu_ns == {}


def test_joined_cpu_cpuacct_mount(tmp_path):
    # many v1 hosts mount cpu and cpuacct together, with "cpuacct" a symlink to "cpu,cpuacct"
    write(tmp_path / "cpu,cpuacct/kubepods" / f"pod{UID_A}" / "cpuacct.usage", "7\n")
    os.symlink("cpu,cpuacct", tmp_path / "cpuacct")
    assert read_pod_counters(tmp_path, clock=lambda: 1).cpu_ns == {UID_A: 7}
    assert read_pod_counters(tmp_path, clock=lambda: 1, cpu_controller="cpu,cpuacct").cpu_ns == {UID_A: 7}
    assert read_pod_counters(tmp_path, clock=lambda: 1, cpu_controller="../cpuacct").cpu_ns == {}
