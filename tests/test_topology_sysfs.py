"""Topology from sysfs: the four fixture machines, edge cases, and this machine."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from tidal_topology.cpuset import format_cpuset, parse_cpuset
from tidal_topology.sysfs import CpuInfo, SysfsError, read_topology

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sysfs"


def layout(n_cpus: int, where) -> list[CpuInfo]:
    """Expected CpuInfo for cpu 0..n-1 from `where(cpu) -> (core, socket, numa)`."""
    return [CpuInfo(cpu, *where(cpu)) for cpu in range(n_cpus)]


# Linux numbering (see make_sysfs.py): first threads of every core, then second threads,
# so a core's unique id is its first thread: cpu % cores_total.
MACHINES = [
    # 1 socket x 4 cores x 2 threads, 1 NUMA: siblings {i, i+4}
    ("single_socket_ht", layout(8, lambda i: (i % 4, 0, 0)), {0: 16384}),
    # 2 sockets x 4 cores x 2 threads, 2 NUMA: socket = (i % 8) // 4, siblings {i, i+8}
    ("dual_socket_ht", layout(16, lambda i: (i % 8, (i % 8) // 4, (i % 8) // 4)), {0: 16384, 1: 16384}),
    # 2 sockets x 8 cores x 2 threads, 4 NUMA (2 per socket): numa = (i % 16) // 4
    ("dual_socket_multi_numa_ht", layout(32, lambda i: (i % 16, (i % 16) // 8, (i % 16) // 4)),
     {n: 16384 for n in range(4)}),
    # 2 sockets x 4 cores, no HT: every cpu is its own core
    ("dual_socket_no_ht", layout(8, lambda i: (i, i // 4, i // 4)), {0: 16384, 1: 16384}),
]


@pytest.mark.parametrize("name, expected_cpus, expected_memory", MACHINES, ids=[m[0] for m in MACHINES])
def test_fixture_machines(name, expected_cpus, expected_memory):
    topo = read_topology(FIXTURES / name)
    assert topo.cpus == expected_cpus
    assert topo.numa_memory_mib == expected_memory


def test_multi_numa_numa_lists_match_sysfs_cpulist():
    topo = read_topology(FIXTURES / "dual_socket_multi_numa_ht")
    for numa in range(4):
        cpulist = (FIXTURES / "dual_socket_multi_numa_ht" / f"devices/system/node/node{numa}/cpulist").read_text()
        assert topo.cpus_on(numa) == parse_cpuset(cpulist)
    assert topo.cpus_on(1) == [4, 5, 6, 7, 20, 21, 22, 23]


def test_core_id_gaps_and_per_socket_restart_give_unique_cores():
    # the multi-NUMA fixture's raw core_id is 0-3 then 8-11 on each socket
    topo = read_topology(FIXTURES / "dual_socket_multi_numa_ht")
    assert len({c.core for c in topo.cpus}) == 16  # 2 sockets x 8 cores
    assert all(sum(1 for c in topo.cpus if c.core == core) == 2 for core in range(16))


def copy_fixture(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root


def test_machine_without_node_directory_is_one_numa_node(tmp_path):
    root = copy_fixture(tmp_path, "dual_socket_ht")
    shutil.rmtree(root / "devices/system/node")
    topo = read_topology(root)
    assert {c.numa for c in topo.cpus} == {0}
    assert topo.cpus_on(0) == list(range(16))
    assert topo.sockets == [0, 1]  # sockets still come from the CPUs
    assert topo.numa_memory_mib == {0: 0}


def test_numa_override_declares_numa_nodes():
    # the single-socket machine declared as two NUMA nodes: even cores' threads -> numa 1
    override = {1: 1, 5: 1, 3: 1, 7: 1}
    topo = read_topology(FIXTURES / "single_socket_ht", numa_override=override)
    assert topo.cpus_on(0) == [0, 2, 4, 6]
    assert topo.cpus_on(1) == [1, 3, 5, 7]
    assert topo.numa_memory_mib == {0: 16384, 1: 0}  # sysfs knows no memory for the declared node


def test_numa_override_of_an_offline_cpu_is_refused():
    with pytest.raises(ValueError, match="cpu 99"):
        read_topology(FIXTURES / "single_socket_ht", numa_override={99: 1})


def test_offline_cpus_are_left_out(tmp_path):
    root = copy_fixture(tmp_path, "dual_socket_no_ht")
    (root / "devices/system/cpu/online").write_text("0-5\n")  # cpus 6, 7 offline
    topo = read_topology(root)
    assert [c.cpu for c in topo.cpus] == [0, 1, 2, 3, 4, 5]
    assert topo.cpus_on(1) == [4, 5]


def test_siblings_fall_back_to_package_and_core_id(tmp_path):
    root = copy_fixture(tmp_path, "dual_socket_ht")
    for cpu in range(16):
        (root / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").unlink()
    assert read_topology(root).cpus == read_topology(FIXTURES / "dual_socket_ht").cpus


BROKEN = [
    # (what, file to change, content, message fragment)
    ("non-integer package", "devices/system/cpu/cpu3/topology/physical_package_id", "x\n", "not an integer"),
    ("bad online list", "devices/system/cpu/online", "0-\n", "not a CPU id"),
    ("cpu in two nodes", "devices/system/node/node1/cpulist", "0,4-7,12-15\n", "listed by node0 and node1"),
    ("no MemTotal", "devices/system/node/node0/meminfo", "Node 0 MemFree: 1 kB\n", "MemTotal"),
]


@pytest.mark.parametrize("what, rel, content, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_sysfs_raises_a_clear_error(tmp_path, what, rel, content, message):
    root = copy_fixture(tmp_path, "dual_socket_ht")
    (root / rel).write_text(content)
    with pytest.raises(SysfsError, match=message):
        read_topology(root)


def test_missing_topology_file_names_the_path(tmp_path):
    root = copy_fixture(tmp_path, "dual_socket_ht")
    (root / "devices/system/cpu/cpu5/topology/core_id").unlink()
    with pytest.raises(SysfsError, match="cpu5/topology/core_id"):
        read_topology(root)


def test_cpu_in_no_node_is_an_error(tmp_path):
    root = copy_fixture(tmp_path, "dual_socket_ht")
    (root / "devices/system/node/node1/cpulist").write_text("4-7\n")  # 12-15 now in no node
    with pytest.raises(SysfsError, match=r"\[12, 13, 14, 15\]"):
        read_topology(root)


def test_this_machine_is_self_consistent():
    topo = read_topology("/sys")
    online = parse_cpuset(Path("/sys/devices/system/cpu/online").read_text())
    assert [c.cpu for c in topo.cpus] == online
    assert len(topo.cpus) == os.cpu_count()
    # every CPU on exactly one NUMA node; the NUMA lists partition the CPUs
    assert sorted(cpu for numa in topo.numa_ids for cpu in topo.cpus_on(numa)) == online
    # a core's id is one of its own CPUs, on the same socket and NUMA node as its siblings
    by_cpu = {c.cpu: c for c in topo.cpus}
    for c in topo.cpus:
        assert by_cpu[c.core].core == c.core and by_cpu[c.core].socket == c.socket
    if Path("/sys/devices/system/node").is_dir():
        assert sum(topo.numa_memory_mib.values()) > 0


def test_this_machine_with_override_as_two_numa_nodes():
    # this 2-CPU test machine is declared as numa0 = cpu0, numa1 = cpu1
    if os.cpu_count() != 2:
        pytest.skip(f"needs the 2-CPU test machine, this one has {os.cpu_count()} CPUs")
    topo = read_topology("/sys", numa_override={0: 0, 1: 1})
    assert topo.cpus_on(0) == [0] and topo.cpus_on(1) == [1]


# -- cpulist parsing -------------------------------------------------------

PARSE_CASES = [
    ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
    ("0", [0]),
    ("", []),
    ("\n", []),
    (" 2-3 , 0 \n", [0, 2, 3]),
    ("3,1,2-3", [1, 2, 3]),  # overlap and disorder are tolerated, result is canonical
    ("5-5", [5]),
]


@pytest.mark.parametrize("text, expected", PARSE_CASES)
def test_parse_cpuset(text, expected):
    assert parse_cpuset(text) == expected


BAD_CPUSETS = [
    ("0-", "'' is not a CPU id"),
    ("-1", "'' is not a CPU id"),
    ("a", "'a' is not a CPU id"),
    ("1,,2", "empty item"),
    ("3-1", "runs backwards"),
    ("1.5", "'1.5' is not a CPU id"),
    ("１", "is not a CPU id"),  # full-width digit
    ("0-3,", "empty item"),
]


@pytest.mark.parametrize("text, message", BAD_CPUSETS)
def test_parse_cpuset_rejects_bad_input(text, message):
    with pytest.raises(ValueError, match=message):
        parse_cpuset(text)


FORMAT_CASES = [
    ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
    ([], ""),
    ([7], "7"),
    ([1, 0], "0-1"),
    ([5, 3, 3, 4], "3-5"),
]


@pytest.mark.parametrize("ids, expected", FORMAT_CASES)
def test_format_cpuset(ids, expected):
    assert format_cpuset(ids) == expected
    assert parse_cpuset(expected) == sorted(set(ids))


def test_format_cpuset_rejects_negative():
    with pytest.raises(ValueError, match="non-negative"):
        format_cpuset([-1, 2])


def test_committed_fixtures_match_the_generator(tmp_path, monkeypatch):
    # regenerate every tree in a temp dir and compare file by file with what is committed
    spec = importlib.util.spec_from_file_location("make_sysfs", FIXTURES.parent / "make_sysfs.py")
    make_sysfs = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "make_sysfs", make_sysfs)  # dataclasses look their module up
    spec.loader.exec_module(make_sysfs)
    for layout_ in make_sysfs.LAYOUTS:
        fresh = tmp_path / layout_.name
        make_sysfs.write_tree(fresh, layout_)
        committed = FIXTURES / layout_.name
        files = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
        for rel in files:
            assert (fresh / rel).read_text() == (committed / rel).read_text(), f"{layout_.name}/{rel}"
