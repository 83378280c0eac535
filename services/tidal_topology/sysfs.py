"""The machine's CPU/NUMA topology, read from a sysfs tree.

Files read (relative to the sysfs root):
- `devices/system/cpu/online` — the online CPUs;
- `devices/system/cpu/cpuN/topology/{physical_package_id,core_id,thread_siblings_list}`;
- `devices/system/node/nodeN/{cpulist,meminfo}` — absent on machines built
  without NUMA support, which then count as one NUMA node 0 holding every CPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from .cpuset import parse_cpuset

_NODE_DIR = re.compile(r"^node([0-9]{1,5})$")
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+([0-9]{1,16})\s*kB\s*$", re.MULTILINE)
# Sysfs ids are small ASCII integers; int() alone would take "٣", "1_0" and
# 10**30, which then fail deep in the event models instead of naming the file.
_ID = re.compile(r"^-?[0-9]{1,9}$")


class SysfsError(Exception):
    """The sysfs tree is missing a file or holds something unreadable."""


class CpuInfo(NamedTuple):
    """One logical CPU. `core` is unique across the machine: the lowest CPU
    id among the core's hyper-thread siblings (as kubelet numbers cores),
    because sysfs `core_id` repeats on every socket."""

    cpu: int
    core: int
    socket: int
    numa: int


@dataclass(frozen=True)
class MachineTopology:
    """Where every online CPU sits, and the memory of every NUMA node (MiB;
    0 where sysfs does not say)."""

    cpus: list[CpuInfo]
    numa_memory_mib: dict[int, int] = field(default_factory=dict)

    @property
    def numa_ids(self) -> list[int]:
        """Every NUMA id with CPUs or memory, ascending."""
        return sorted({c.numa for c in self.cpus} | set(self.numa_memory_mib))

    @property
    def sockets(self) -> list[int]:
        """Every socket id, ascending."""
        return sorted({c.socket for c in self.cpus})

    def cpus_on(self, numa: int) -> list[int]:
        """The CPU ids on NUMA node `numa`, ascending."""
        return [c.cpu for c in self.cpus if c.numa == numa]


def read_topology(sysfs: str | Path = "/sys", numa_override: Mapping[int, int] | None = None) -> MachineTopology:
    """The topology of the online CPUs under `sysfs`.

    `numa_override` maps cpu -> NUMA id and replaces what sysfs says for
    those CPUs (to declare NUMA nodes a test machine does not have); a NUMA
    id sysfs does not know gets memory 0. Raises SysfsError on a missing or
    malformed file, ValueError on an override naming an offline CPU."""
    root = Path(sysfs)
    cpu_dir = root / "devices/system/cpu"
    online = _cpulist(cpu_dir / "online")
    if not online:
        raise SysfsError(f"{cpu_dir / 'online'} lists no CPU")

    package: dict[int, int] = {}
    core_id: dict[int, int] = {}
    siblings: dict[int, list[int]] = {}
    for cpu in online:
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        # Some ARM firmware reports package -1: one unnamed socket.
        package[cpu] = max(_int_file(topo / "physical_package_id"), 0)
        core_id[cpu] = _int_file(topo / "core_id")
        siblings_file = topo / "thread_siblings_list"
        if siblings_file.exists():
            siblings[cpu] = _cpulist(siblings_file)
    unique_core = _unique_cores(online, package, core_id, siblings)

    numa_of, memory = _read_nodes(root / "devices/system/node", online)
    for cpu, numa in (numa_override or {}).items():
        if cpu not in numa_of:
            raise ValueError(f"numa_override names cpu {cpu}, which is not online")
        if numa < 0:
            raise ValueError(f"numa_override gives cpu {cpu} a negative NUMA id {numa}")
        numa_of[cpu] = numa
    used = set(numa_of.values())
    memory = {numa: memory.get(numa, 0) for numa in sorted(used)}
    cpus = [CpuInfo(cpu, unique_core[cpu], package[cpu], numa_of[cpu]) for cpu in online]
    return MachineTopology(cpus=cpus, numa_memory_mib=memory)


def memory_nodes(sysfs: str | Path = "/sys") -> set[int]:
    """NUMA memory nodes the kernel has (node0 only on machines without NUMA)."""
    found = {int(p.name[4:]) for p in (Path(sysfs) / "devices/system/node").glob("node[0-9]*")}
    return found or {0}


def _unique_cores(online: list[int], package: dict[int, int], core_id: dict[int, int],
                  siblings: dict[int, list[int]]) -> dict[int, int]:
    """cpu -> lowest online sibling; siblings come from thread_siblings_list,
    or, where a kernel lacks it, from sharing (package, core_id)."""
    online_set = set(online)
    by_core: dict[tuple[int, int], list[int]] = {}
    for cpu in online:
        by_core.setdefault((package[cpu], core_id[cpu]), []).append(cpu)
    result = {}
    for cpu in online:
        group = siblings.get(cpu) or by_core[(package[cpu], core_id[cpu])]
        group_online = [c for c in group if c in online_set]
        if cpu not in group_online:
            raise SysfsError(f"cpu{cpu}: thread_siblings_list {group} does not contain the CPU itself")
        result[cpu] = min(group_online)
    return result


def _read_nodes(node_dir: Path, online: list[int]) -> tuple[dict[int, int], dict[int, int]]:
    if not node_dir.is_dir():
        return {cpu: 0 for cpu in online}, {0: 0}
    numa_of: dict[int, int] = {}
    memory: dict[int, int] = {}
    for entry in sorted(node_dir.iterdir()):
        match = _NODE_DIR.match(entry.name)
        if not match:
            continue
        numa = int(match.group(1))
        for cpu in _cpulist(entry / "cpulist"):
            if cpu in numa_of:
                raise SysfsError(f"cpu{cpu} is listed by node{numa_of[cpu]} and node{numa}")
            numa_of[cpu] = numa
        memory[numa] = _memtotal_mib(entry / "meminfo")
    if not memory:
        return {cpu: 0 for cpu in online}, {0: 0}
    missing = [cpu for cpu in online if cpu not in numa_of]
    if missing:
        raise SysfsError(f"online cpus {missing} are in no {node_dir}/nodeN/cpulist")
    return {cpu: numa_of[cpu] for cpu in online}, memory


def _memtotal_mib(path: Path) -> int:
    if not path.exists():
        return 0
    match = _MEMTOTAL.search(_read(path))
    if not match:
        raise SysfsError(f"{path}: no 'Node N MemTotal: X kB' line (X at most 16 digits)")
    return int(match.group(1)) // 1024


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise SysfsError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise SysfsError(f"{path}: not text") from None


def _int_file(path: Path) -> int:
    text = _read(path).strip()
    if not _ID.match(text):
        raise SysfsError(f"{path}: {text[:40]!r} is not an integer id")
    return int(text)


def _cpulist(path: Path) -> list[int]:
    try:
        return parse_cpuset(_read(path))
    except ValueError as exc:
        raise SysfsError(f"{path}: {exc}") from None
